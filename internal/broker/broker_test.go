package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
)

type fakeSecrets map[string]string // owner/name -> value

func (f fakeSecrets) Reveal(_ context.Context, owner, name string) (string, secrets.Meta, error) {
	v, ok := f[owner+"/"+name]
	if !ok {
		return "", secrets.Meta{}, sandbox.Errorf(sandbox.ClassNotFound, "no secret %q", name)
	}
	return v, secrets.Meta{Name: name, Placeholder: "ph-" + name}, nil
}

func TestTransform(t *testing.T) {
	b := &Broker{cfg: Config{Secrets: fakeSecrets{"alice/TOK": "s3cret", "bob/TOK": "bobs"}}}
	info := &connInfo{owner: "alice", name: "api.test"}
	rules := []sandbox.EgressRule{{Host: "api.test", Methods: []string{"POST"}, Paths: []string{"/v1/"},
		Headers: map[string]string{"Authorization": "Bearer ${secret:TOK}"}, Secrets: []string{"TOK"}}}

	r := httptest.NewRequest("POST", "https://api.test/v1/chat?key=ph-TOK", nil)
	r.Header.Set("Authorization", "Bearer sandbox-supplied")
	r.Header.Set("X-Key", "ph-TOK")
	out, used, err := b.transform(r, info, rules)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Header.Get("Authorization"); got != "Bearer s3cret" {
		t.Errorf("Authorization %q", got)
	}
	if out.Header.Get("X-Key") != "s3cret" || out.URL.RawQuery != "key=s3cret" {
		t.Errorf("placeholders: %v %q", out.Header, out.URL.RawQuery)
	}
	if len(used) != 1 || used[0] != "TOK" {
		t.Errorf("used %v", used)
	}

	// Outside the rule's methods and paths: no header, placeholders still
	// replaced (the secret is bound to the host).
	r = httptest.NewRequest("GET", "https://api.test/other", nil)
	r.Header.Set("X-Key", "ph-TOK")
	out, _, err = b.transform(r, info, rules)
	if err != nil {
		t.Fatal(err)
	}
	if out.Header.Get("Authorization") != "" || out.Header.Get("X-Key") != "s3cret" {
		t.Errorf("GET /other: %v", out.Header)
	}

	// A missing secret fails the request rather than sending it without.
	info.owner = "carol"
	if _, _, err := b.transform(httptest.NewRequest("POST", "https://api.test/v1/x", nil), info, rules); err == nil {
		t.Error("a request went out without its secret")
	}
}

func TestSecretRefs(t *testing.T) {
	got := SecretRefs(sandbox.EgressRule{Secrets: []string{"A"}, Headers: map[string]string{"X": "${secret:B} and ${secret:C_1}"}})
	if strings.Join(got, ",") != "A,B,C_1" && strings.Join(got, ",") != "A,C_1,B" {
		t.Errorf("refs %v", got)
	}
}

func TestReadServerName(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	go func() {
		_ = tls.Client(c2, &tls.Config{ServerName: "api.example.com", InsecureSkipVerify: true}).Handshake()
		c2.Close()
	}()
	br := bufio.NewReaderSize(c1, 16<<10)
	if got := readServerName(br); got != "api.example.com" {
		t.Fatalf("server name %q", got)
	}
	// Nothing was consumed: the hello is still there for the real server.
	if b, _ := br.Peek(1); len(b) != 1 || b[0] != 0x16 {
		t.Fatal("the ClientHello was consumed")
	}
}

func TestCALeaf(t *testing.T) {
	ca, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: pool}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "other.test", Roots: pool}); err == nil {
		t.Fatal("a leaf verified for another name")
	}
}

// TestTransformBody: a bound placeholder in a body of known length is
// replaced (the length follows); a body of unknown length, a compressed
// one, or one over MaxBodySubstitution goes as it was.
func TestTransformBody(t *testing.T) {
	b := &Broker{cfg: Config{Secrets: fakeSecrets{"alice/TOK": "s3cret-longer-than-the-placeholder"}}}
	info := &connInfo{owner: "alice", name: "api.test"}
	rules := []sandbox.EgressRule{{Host: "api.test", Secrets: []string{"TOK"}}}
	read := func(out *http.Request) string {
		t.Helper()
		data, err := io.ReadAll(out.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}

	r := httptest.NewRequest("POST", "https://api.test/v1", strings.NewReader(`{"key":"ph-TOK","again":"ph-TOK"}`))
	out, used, err := b.transform(r, info, rules)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"key":"s3cret-longer-than-the-placeholder","again":"s3cret-longer-than-the-placeholder"}`
	if got := read(out); got != want || out.ContentLength != int64(len(want)) || len(used) != 1 {
		t.Errorf("body %q length %d used %v", got, out.ContentLength, used)
	}

	for name, mk := range map[string]func() *http.Request{
		"chunked": func() *http.Request {
			r := httptest.NewRequest("POST", "https://api.test/v1", strings.NewReader("ph-TOK"))
			r.ContentLength = -1
			return r
		},
		"gzip": func() *http.Request {
			r := httptest.NewRequest("POST", "https://api.test/v1", strings.NewReader("ph-TOK"))
			r.Header.Set("Content-Encoding", "gzip")
			return r
		},
		"large": func() *http.Request {
			return httptest.NewRequest("POST", "https://api.test/v1", strings.NewReader("ph-TOK"+strings.Repeat("x", MaxBodySubstitution)))
		},
	} {
		r := mk()
		out, used, err := b.transform(r, info, rules)
		if err != nil {
			t.Fatal(err)
		}
		if out.Body != nil || len(used) != 0 {
			t.Errorf("%s: the body was changed (used %v)", name, used)
		}
		if got := read(r); !strings.HasPrefix(got, "ph-TOK") {
			t.Errorf("%s: the body lost its start: %.20q", name, got)
		}
	}

	// Not bound (a header rule only): the body is not touched.
	r = httptest.NewRequest("POST", "https://api.test/v1", strings.NewReader("ph-TOK"))
	out, _, err = b.transform(r, info, []sandbox.EgressRule{{Host: "api.test", Headers: map[string]string{"A": "${secret:TOK}"}}})
	if err != nil || out.Body != nil {
		t.Errorf("an unbound secret's placeholder was looked for in the body: %v", err)
	}
}
