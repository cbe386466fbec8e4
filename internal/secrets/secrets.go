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
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// MaxValue is the largest secret value in bytes.
const MaxValue = 16 << 10

// Meta is what the API says about a secret: everything but its value.
type Meta struct {
	// ID is the secret's identifier (sec_...), stable while it exists; a
	// secret deleted and created again has a new one.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Version counts the values stored: 1 when created, one more at each
	// replacement (rotation).
	Version int `json:"version"`
	// Metadata is the caller's, stored in clear beside the sealed value.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Placeholder is the text a sandbox may carry instead of the value:
	// the broker replaces it by the value in requests to the hosts the
	// sandbox's rules bind the secret to, and nowhere else.
	Placeholder string    `json:"placeholder"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// record is a secret as stored.
type record struct {
	Owner       string            `json:"owner"`
	Name        string            `json:"name"`
	ID          string            `json:"id,omitempty"`
	Version     int               `json:"version,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Placeholder string            `json:"placeholder"`
	KeyID       string            `json:"key_id"` // which key sealed it
	Nonce       []byte            `json:"nonce"`
	Sealed      []byte            `json:"sealed"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

func (r *record) meta() Meta {
	m := Meta{ID: r.ID, Name: r.Name, Version: r.Version, Placeholder: r.Placeholder, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if len(r.Metadata) > 0 {
		m.Metadata = make(map[string]string, len(r.Metadata))
		for k, v := range r.Metadata {
			m.Metadata[k] = v
		}
	}
	// Records written before IDs and versions were kept: an ID derived
	// from what identifies the record, version 1.
	if m.ID == "" {
		sum := sha256.Sum256([]byte("agentbox secret id\x00" + r.Owner + "\x00" + r.Name + "\x00" + r.CreatedAt.Format(time.RFC3339Nano)))
		m.ID = IDPrefix + hex.EncodeToString(sum[:12])
	}
	if m.Version == 0 {
		m.Version = 1
	}
	return m
}

// IDPrefix starts every secret ID; names cannot start with it.
const IDPrefix = "sec_"

// Metadata limits (E2B's, whose Secret API shares the vault).
const (
	maxMetaEntries = 32
	maxMetaKey     = 128
	maxMetaValue   = 1024
	maxMetaTotal   = 8192
)

// CheckMetadata validates a secret's metadata.
func CheckMetadata(md map[string]string) error {
	if len(md) > maxMetaEntries {
		return sandbox.Invalid("metadata", "a secret has at most %d metadata entries", maxMetaEntries)
	}
	total := 0
	for k, v := range md {
		if k == "" || len(k) > maxMetaKey || len(v) > maxMetaValue {
			return sandbox.Invalid("metadata", "metadata keys are 1 to %d bytes, values at most %d", maxMetaKey, maxMetaValue)
		}
		total += len(k) + len(v)
	}
	if total > maxMetaTotal {
		return sandbox.Invalid("metadata", "a secret's metadata is at most %d bytes", maxMetaTotal)
	}
	return nil
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
	if strings.HasPrefix(strings.ToLower(name), IDPrefix) {
		return sandbox.Invalid("name", "secret names cannot start with %q (the prefix of secret IDs)", IDPrefix)
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
// replacing its value; the ID, placeholder, metadata and creation time
// stay on update.
func (v *Vault) Put(ctx context.Context, owner, name, value string) (m Meta, created bool, err error) {
	return v.put(ctx, owner, name, value, putAny, nil)
}

// Create stores a new secret with its metadata; one of that name already
// is ClassConflict.
func (v *Vault) Create(ctx context.Context, owner, name, value string, metadata map[string]string) (Meta, error) {
	if metadata == nil {
		metadata = map[string]string{}
	}
	m, _, err := v.put(ctx, owner, name, value, putCreate, metadata)
	return m, err
}

// Update replaces the value of an existing secret (ClassNotFound when
// there is none) and, when metadata is not nil, its metadata.
func (v *Vault) Update(ctx context.Context, owner, name, value string, metadata map[string]string) (Meta, error) {
	m, _, err := v.put(ctx, owner, name, value, putUpdate, metadata)
	return m, err
}

type putMode int

const (
	putAny putMode = iota
	putCreate
	putUpdate
)

// errExists and errMissing end an UpdateDoc whose record is not in the
// state the mode needs.
var errExists, errMissing = errors.New("exists"), errors.New("missing")

func (v *Vault) put(ctx context.Context, owner, name, value string, mode putMode, metadata map[string]string) (m Meta, created bool, err error) {
	if err := CheckName(name); err != nil {
		return Meta{}, false, err
	}
	if value == "" {
		return Meta{}, false, sandbox.Invalid("value", "a secret's value must not be empty")
	}
	if len(value) > MaxValue {
		return Meta{}, false, sandbox.Invalid("value", "a secret's value is at most %d bytes", MaxValue)
	}
	if err := CheckMetadata(metadata); err != nil {
		return Meta{}, false, err
	}
	if v.maxUser > 0 && mode != putUpdate {
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
		r := record{Owner: owner, Name: name, KeyID: v.keyID, Nonce: nonce, Sealed: sealed, CreatedAt: now, UpdatedAt: now,
			Version: 1, Metadata: metadata}
		created = true
		var prev record
		if old != nil && json.Unmarshal(old, &prev) == nil && prev.Owner == owner && prev.Name == name {
			if mode == putCreate {
				return nil, 0, errExists
			}
			pm := prev.meta()
			r.ID, r.Version, r.CreatedAt, r.Placeholder, created = pm.ID, pm.Version+1, prev.CreatedAt, prev.Placeholder, false
			if metadata == nil {
				r.Metadata = prev.Metadata
			}
		} else if mode == putUpdate {
			return nil, 0, errMissing
		}
		if r.ID == "" {
			r.ID = newID()
		}
		if r.Placeholder == "" {
			r.Placeholder = newPlaceholder(name)
		}
		m = r.meta()
		data, err := json.Marshal(r)
		return data, 0, err
	})
	switch {
	case errors.Is(err, errExists):
		return Meta{}, false, sandbox.Errorf(sandbox.ClassConflict, "a secret %q exists already", name)
	case errors.Is(err, errMissing):
		return Meta{}, false, notFound(name)
	case err != nil:
		return Meta{}, false, fmt.Errorf("store secret: %w", err)
	}
	return m, created, nil
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return IDPrefix + hex.EncodeToString(b)
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

// Lookup returns owner's secret by ID (sec_...) or name.
func (v *Vault) Lookup(ctx context.Context, owner, ref string) (Meta, error) {
	if !strings.HasPrefix(ref, IDPrefix) {
		return v.Get(ctx, owner, ref)
	}
	list, err := v.List(ctx, owner)
	if err != nil {
		return Meta{}, err
	}
	for _, m := range list {
		if m.ID == ref {
			return m, nil
		}
	}
	return Meta{}, sandbox.Errorf(sandbox.ClassNotFound, "no secret %q", ref)
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
