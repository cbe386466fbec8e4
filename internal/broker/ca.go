package broker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CA is the broker's certificate authority: it signs the leaf
// certificates the broker shows sandboxes for the hosts it intercepts.
// Only sandboxes of this daemon trust it (BundlePath is mounted into
// them); its key never leaves the data dir.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
	leafLife   = 7 * 24 * time.Hour
)

// LoadCA reads the CA from dir, creating it (key owner-only) on first use:
// it survives restarts, so sandboxes that trust it keep working.
func LoadCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPEM, err1 := os.ReadFile(filepath.Join(dir, caCertFile))
	keyPEM, err2 := os.ReadFile(filepath.Join(dir, caKeyFile))
	if errors.Is(err1, fs.ErrNotExist) || errors.Is(err2, fs.ErrNotExist) {
		if certPEM, keyPEM, err1 = newCA(); err1 != nil {
			return nil, err1
		}
		if err := os.WriteFile(filepath.Join(dir, caKeyFile), keyPEM, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, caCertFile), certPEM, 0o644); err != nil {
			return nil, err
		}
	} else if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("broker CA: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("broker CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("broker CA in %s: not an ECDSA key", dir)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, certPEM: certPEM, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

func newCA() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "agentbox egress broker CA", Organization: []string{"agentbox"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// CertPEM is the CA certificate.
func (c *CA) CertPEM() []byte { return c.certPEM }

// Leaf returns a certificate for host signed by the CA, cached until
// close to its end.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && time.Until(l.Leaf.NotAfter) > leafLife/2 {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(c.leaves) > 4096 {
		clear(c.leaves)
	}
	c.leaves[host] = l
	return l, nil
}

// systemBundles are where Debian/Ubuntu, Fedora/RHEL and Alpine keep the
// host's CA bundle.
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// WriteBundle writes the host's CA bundle plus the CA to path (world
// readable: certificates only), for sandboxes to trust.
func (c *CA) WriteBundle(path string) error {
	var out []byte
	for _, p := range systemBundles {
		if data, err := os.ReadFile(p); err == nil {
			out = append(out, data...)
			if len(out) > 0 && out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			break
		}
	}
	out = append(out, c.certPEM...)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
