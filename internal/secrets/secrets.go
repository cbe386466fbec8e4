// Package secrets keeps tenants' named secrets: values an API caller
// stores once and that the egress broker (internal/broker) puts into
// requests leaving a sandbox, so that the sandbox itself never holds them.
// A value is written, replaced and deleted through the API but never read
// back: only the broker reveals it, for the hosts a sandbox's rules bind it
// to.
//
// Values are encrypted at rest with AES-256-GCM under one key (LoadKey);
// the owner and name are the additional data, so a record copied to
// another tenant's or name's key in the store does not decrypt. Records
// live in the store's documents (store.Docs): in Redis every replica sees
// them, in bbolt they survive a restart.
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// MaxValue is the largest secret value in bytes.
const MaxValue = 16 << 10

// Meta is what the API says about a secret: everything but its value.
type Meta struct {
	Name string `json:"name"`
	// Placeholder is the text a sandbox may carry instead of the value:
	// the broker replaces it by the value in requests to the hosts the
	// sandbox's rules bind the secret to, and nowhere else.
	Placeholder string    `json:"placeholder"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// record is a secret as stored.
type record struct {
	Owner       string    `json:"owner"`
	Name        string    `json:"name"`
	Placeholder string    `json:"placeholder"`
	KeyID       string    `json:"key_id"` // which key sealed it
	Nonce       []byte    `json:"nonce"`
	Sealed      []byte    `json:"sealed"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func (r *record) meta() Meta {
	return Meta{Name: r.Name, Placeholder: r.Placeholder, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

const kind = "secret"

// ErrWrongKey is returned when a secret was sealed with another key than
// the daemon's (a replica started with a different SECRETS_KEY).
var ErrWrongKey = errors.New("the secret was encrypted with another key than this server's SECRETS_KEY")

// Vault stores secrets. It is safe for concurrent use.
type Vault struct {
	docs    store.Docs
	aead    cipher.AEAD
	keyID   string
	maxUser int
}

// New returns a vault over docs encrypting with key (KeySize bytes);
// maxPerUser caps each owner's secrets (0: no cap).
func New(docs store.Docs, key []byte, maxPerUser int) (*Vault, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets key: want %d bytes, have %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("agentbox secrets key id\x00"), key...))
	return &Vault{docs: docs, aead: aead, keyID: hex.EncodeToString(sum[:8]), maxUser: maxPerUser}, nil
}

// CheckName validates a secret name: 1 to 64 letters, digits, '_' or '-',
// starting with a letter or '_' (so that it also is an environment variable
// name when it has no '-').
func CheckName(name string) error {
	if name == "" || len(name) > 64 {
		return sandbox.Invalid("name", "a secret name is 1 to 64 characters")
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_' || (i > 0 && (r >= '0' && r <= '9' || r == '-'))
		if !ok {
			return sandbox.Invalid("name", "secret name %q: letters, digits, '_' and '-' only, not starting with a digit or '-'", name)
		}
	}
	return nil
}

func docKey(owner, name string) string { return url.PathEscape(owner) + "/" + name }

func aad(owner, name string) []byte {
	return []byte("agentbox secret\x00" + owner + "\x00" + name)
}

func notFound(name string) error {
	return sandbox.Errorf(sandbox.ClassNotFound, "no secret %q", name)
}

// Put stores value as owner's secret name, creating it (created true) or
// replacing its value; the placeholder and creation time stay on update.
func (v *Vault) Put(ctx context.Context, owner, name, value string) (m Meta, created bool, err error) {
	if err := CheckName(name); err != nil {
		return Meta{}, false, err
	}
	if value == "" {
		return Meta{}, false, sandbox.Invalid("value", "a secret's value must not be empty")
	}
	if len(value) > MaxValue {
		return Meta{}, false, sandbox.Invalid("value", "a secret's value is at most %d bytes", MaxValue)
	}
	if v.maxUser > 0 {
		have, err := v.List(ctx, owner)
		if err != nil {
			return Meta{}, false, err
		}
		exists := false
		for _, h := range have {
			exists = exists || h.Name == name
		}
		if !exists && len(have) >= v.maxUser {
			return Meta{}, false, sandbox.Errorf(sandbox.ClassQuota, "user %q has %d secrets, the most SECRETS_MAX_PER_USER allows", owner, len(have))
		}
	}
	nonce, err := randomNonce(v.aead.NonceSize())
	if err != nil {
		return Meta{}, false, err
	}
	sealed := v.aead.Seal(nil, nonce, []byte(value), aad(owner, name))
	now := time.Now().UTC()
	err = v.docs.UpdateDoc(ctx, kind, url.PathEscape(owner), docKey(owner, name), func(old []byte) ([]byte, time.Duration, error) {
		r := record{Owner: owner, Name: name, KeyID: v.keyID, Nonce: nonce, Sealed: sealed, CreatedAt: now, UpdatedAt: now}
		created = true
		var prev record
		if old != nil && json.Unmarshal(old, &prev) == nil && prev.Owner == owner && prev.Name == name {
			r.CreatedAt, r.Placeholder, created = prev.CreatedAt, prev.Placeholder, false
		}
		if r.Placeholder == "" {
			r.Placeholder = newPlaceholder(name)
		}
		m = r.meta()
		data, err := json.Marshal(r)
		return data, 0, err
	})
	if err != nil {
		return Meta{}, false, fmt.Errorf("store secret: %w", err)
	}
	return m, created, nil
}

// randomNonce returns a fresh random GCM nonce: one per seal, never
// reused under the key (96 random bits, safe for far more secrets than a
// store holds).
func randomNonce(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return b, nil
}

// newPlaceholder returns a placeholder for name: recognizable in logs and
// code, and random so that ordinary text never matches one by chance.
func newPlaceholder(name string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "agentbox-secret-" + name + "-" + hex.EncodeToString(b)
}

func (v *Vault) get(ctx context.Context, owner, name string) (*record, error) {
	if err := CheckName(name); err != nil {
		return nil, notFound(name)
	}
	data, err := v.docs.Doc(ctx, kind, docKey(owner, name))
	if err != nil {
		return nil, err
	}
	var r record
	if data == nil || json.Unmarshal(data, &r) != nil || r.Owner != owner || r.Name != name {
		return nil, notFound(name)
	}
	return &r, nil
}

// Get returns owner's secret name without its value.
func (v *Vault) Get(ctx context.Context, owner, name string) (Meta, error) {
	r, err := v.get(ctx, owner, name)
	if err != nil {
		return Meta{}, err
	}
	return r.meta(), nil
}

// List returns owner's secrets, by name, without values.
func (v *Vault) List(ctx context.Context, owner string) ([]Meta, error) {
	docs, err := v.docs.GroupDocs(ctx, kind, url.PathEscape(owner))
	if err != nil {
		return nil, err
	}
	out := make([]Meta, 0, len(docs))
	for _, d := range docs {
		var r record
		if json.Unmarshal(d, &r) == nil && r.Owner == owner {
			out = append(out, r.meta())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Delete removes owner's secret name; a missing one is ClassNotFound.
func (v *Vault) Delete(ctx context.Context, owner, name string) error {
	if _, err := v.get(ctx, owner, name); err != nil {
		return err
	}
	return v.docs.UpdateDoc(ctx, kind, url.PathEscape(owner), docKey(owner, name), func([]byte) ([]byte, time.Duration, error) {
		return nil, 0, nil
	})
}

// Reveal returns the value of owner's secret name and its metadata. Only
// the broker calls it, to put the value into a request leaving a sandbox
// of owner; nothing returns the value to an API caller.
func (v *Vault) Reveal(ctx context.Context, owner, name string) (string, Meta, error) {
	r, err := v.get(ctx, owner, name)
	if err != nil {
		return "", Meta{}, err
	}
	if r.KeyID != v.keyID {
		return "", Meta{}, fmt.Errorf("secret %q: %w", name, ErrWrongKey)
	}
	plain, err := v.aead.Open(nil, r.Nonce, r.Sealed, aad(owner, name))
	if err != nil {
		return "", Meta{}, fmt.Errorf("secret %q does not decrypt: %w", name, err)
	}
	return string(plain), r.meta(), nil
}
