package secrets

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the length of the AES-256 key that encrypts secrets.
const KeySize = 32

// ErrNoSharedKey is returned by LoadKey for a shared store without an
// operator key: replicas generating keys of their own could not read each
// other's secrets.
var ErrNoSharedKey = errors.New("a shared store (REDIS_ENABLED) needs SECRETS_KEY or SECRETS_KEY_FILE: every replica must encrypt secrets with the same key")

// keyFileName is the generated key's file in the data dir.
const keyFileName = "secrets.key"

// LoadKey returns the key that encrypts secrets: the operator's
// (SECRETS_KEY, else SECRETS_KEY_FILE), else on a store of this host alone
// one kept in dataDir, generated (owner-only) on first use. With shared set
// (several replicas on one store) an operator key is required.
func LoadKey(s Settings, dataDir string, shared bool, log *slog.Logger) ([]byte, error) {
	if s.SecretsKey != "" {
		k, err := ParseKey(s.SecretsKey)
		if err != nil {
			return nil, fmt.Errorf("SECRETS_KEY: %w", err)
		}
		return k, nil
	}
	if s.SecretsKeyFile != "" {
		data, err := os.ReadFile(s.SecretsKeyFile)
		if err != nil {
			return nil, fmt.Errorf("SECRETS_KEY_FILE: %w", err)
		}
		k, err := ParseKey(string(data))
		if err != nil {
			return nil, fmt.Errorf("SECRETS_KEY_FILE %s: %w", s.SecretsKeyFile, err)
		}
		return k, nil
	}
	if shared {
		return nil, ErrNoSharedKey
	}
	path := filepath.Join(dataDir, keyFileName)
	data, err := os.ReadFile(path)
	if err == nil {
		k, err := ParseKey(string(data))
		if err != nil {
			return nil, fmt.Errorf("secrets key %s: %w", path, err)
		}
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("secrets key %s is readable by others (mode %o): chmod 600 it", path, st.Mode().Perm())
		}
		log.Info("secrets are encrypted with the key in the data dir", "file", path)
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	// O_EXCL: two daemons starting on one data dir must not each write a
	// key of their own.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadKey(s, dataDir, shared, log)
	}
	if err != nil {
		return nil, fmt.Errorf("write secrets key: %w", err)
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n"); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("write secrets key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write secrets key: %w", err)
	}
	log.Warn("generated a key for secrets at rest in the data dir; back it up (secrets are unreadable without it) and set SECRETS_KEY before sharing the store between replicas", "file", path)
	return k, nil
}

// ParseKey reads a 32-byte key written in base64 (standard or URL, padded
// or not) or hex.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if k, err := hex.DecodeString(s); err == nil && len(k) == KeySize {
		return k, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("want %d bytes in base64 or hex (e.g. openssl rand -base64 32)", KeySize)
}
