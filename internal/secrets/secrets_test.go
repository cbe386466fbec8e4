package secrets

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func boltDocs(t *testing.T) (*store.Bolt, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	b, err := store.OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, path
}

func TestVaultLifecycle(t *testing.T) {
	ctx := context.Background()
	db, path := boltDocs(t)
	v, err := New(db, testKey(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	m, created, err := v.Put(ctx, "alice", "OPENAI_KEY", "sk-live-1234567890")
	if err != nil || !created {
		t.Fatalf("put: %v created=%v", err, created)
	}
	if !strings.HasPrefix(m.Placeholder, "agentbox-secret-OPENAI_KEY-") {
		t.Fatalf("placeholder %q", m.Placeholder)
	}
	m2, created, err := v.Put(ctx, "alice", "OPENAI_KEY", "sk-live-rotated")
	if err != nil || created || m2.Placeholder != m.Placeholder || !m2.CreatedAt.Equal(m.CreatedAt) {
		t.Fatalf("update: %v created=%v %+v %+v", err, created, m2, m)
	}
	val, _, err := v.Reveal(ctx, "alice", "OPENAI_KEY")
	if err != nil || val != "sk-live-rotated" {
		t.Fatalf("reveal %q %v", val, err)
	}
	// Another tenant sees nothing of it.
	if _, _, err := v.Reveal(ctx, "bob", "OPENAI_KEY"); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("bob reveals alice's secret: %v", err)
	}
	if l, _ := v.List(ctx, "bob"); len(l) != 0 {
		t.Fatalf("bob lists %v", l)
	}
	if l, _ := v.List(ctx, "alice"); len(l) != 1 || l[0].Name != "OPENAI_KEY" {
		t.Fatalf("alice lists %v", l)
	}
	if err := v.Delete(ctx, "bob", "OPENAI_KEY"); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("bob deletes alice's secret: %v", err)
	}
	// At rest the value is nowhere in the database file.
	_ = db.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("sk-live")) {
		t.Fatal("the secret's value is in the database file in the clear")
	}
}

func TestVaultSealBindsOwnerAndName(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	v, _ := New(mem, testKey(2), 0)
	if _, _, err := v.Put(ctx, "alice", "TOKEN", "value-a"); err != nil {
		t.Fatal(err)
	}
	// Copy alice's sealed record to bob's key: it must not open for bob.
	data, _ := mem.Doc(ctx, kind, docKey("alice", "TOKEN"))
	forged := bytes.Replace(data, []byte(`"owner":"alice"`), []byte(`"owner":"bob"`), 1)
	_ = mem.UpdateDoc(ctx, kind, "bob", docKey("bob", "TOKEN"), func([]byte) ([]byte, time.Duration, error) { return forged, 0, nil })
	if _, _, err := v.Reveal(ctx, "bob", "TOKEN"); err == nil {
		t.Fatal("a record moved to another tenant decrypted")
	}
	// Another key: a clear error, not garbage.
	w, _ := New(mem, testKey(3), 0)
	if _, _, err := w.Reveal(ctx, "alice", "TOKEN"); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("wrong key: %v", err)
	}
}

func TestVaultValidation(t *testing.T) {
	ctx := context.Background()
	v, _ := New(store.NewMemory(), testKey(4), 1)
	for _, name := range []string{"", "1abc", "-x", "a b", "a/b", strings.Repeat("a", 65)} {
		if _, _, err := v.Put(ctx, "u", name, "x"); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if _, _, err := v.Put(ctx, "u", "A", ""); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("empty value: %v", err)
	}
	if _, _, err := v.Put(ctx, "u", "A", "x"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Put(ctx, "u", "B", "x"); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Errorf("over the cap: %v", err)
	}
	if _, _, err := v.Put(ctx, "u", "A", "y"); err != nil {
		t.Errorf("update at the cap: %v", err)
	}
}

func TestLoadKey(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	if _, err := LoadKey(Settings{}, dir, true, log); !errors.Is(err, ErrNoSharedKey) {
		t.Fatalf("shared store without a key: %v", err)
	}
	k1, err := LoadKey(Settings{}, dir, false, log)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, keyFileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, st)
	}
	k2, err := LoadKey(Settings{}, dir, false, log)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("reloaded key differs: %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, keyFileName), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(Settings{}, dir, false, log); err == nil {
		t.Fatal("a world-readable key file was accepted")
	}
	k, err := LoadKey(Settings{SecretsKey: strings.Repeat("ab", KeySize)}, dir, true, log)
	if err != nil || k[0] != 0xab {
		t.Fatalf("hex key: %v", err)
	}
	if _, err := LoadKey(Settings{SecretsKey: "short"}, dir, true, log); err == nil {
		t.Fatal("a short key was accepted")
	}
}

// Create, Update and Lookup (E2B's Secret API): an ID and a version per
// secret, metadata kept, a second create refused, an update of nothing
// refused.
func TestVaultCreateUpdateLookup(t *testing.T) {
	ctx := context.Background()
	db, _ := boltDocs(t)
	v, err := New(db, testKey(3), 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := v.Create(ctx, "alice", "openai-key", "v1", map[string]string{"team": "ml"})
	if err != nil || m.Version != 1 || !strings.HasPrefix(m.ID, IDPrefix) || m.Metadata["team"] != "ml" {
		t.Fatalf("create: %+v %v", m, err)
	}
	if _, err := v.Create(ctx, "alice", "openai-key", "v2", nil); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("second create: %v", err)
	}
	if _, err := v.Update(ctx, "alice", "missing", "v", nil); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("update of nothing: %v", err)
	}
	u, err := v.Update(ctx, "alice", "openai-key", "v2", nil)
	if err != nil || u.Version != 2 || u.ID != m.ID || u.Metadata["team"] != "ml" || u.Placeholder != m.Placeholder {
		t.Fatalf("update: %+v %v", u, err)
	}
	u, err = v.Update(ctx, "alice", "openai-key", "v3", map[string]string{})
	if err != nil || u.Version != 3 || len(u.Metadata) != 0 {
		t.Fatalf("update clearing metadata: %+v %v", u, err)
	}
	if val, _, _ := v.Reveal(ctx, "alice", "openai-key"); val != "v3" {
		t.Fatalf("value after updates %q", val)
	}
	// Put (the native API's create-or-replace) counts versions too.
	if p, created, err := v.Put(ctx, "alice", "openai-key", "v4"); err != nil || created || p.Version != 4 {
		t.Fatalf("put: %+v %v %v", p, created, err)
	}
	for _, ref := range []string{m.ID, "openai-key"} {
		if got, err := v.Lookup(ctx, "alice", ref); err != nil || got.Name != "openai-key" {
			t.Fatalf("lookup %s: %+v %v", ref, got, err)
		}
	}
	if _, err := v.Lookup(ctx, "bob", m.ID); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("bob looks up alice's secret by ID: %v", err)
	}
	if _, err := v.Create(ctx, "alice", "sec_x", "v", nil); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("a name with the ID prefix: %v", err)
	}
	big := map[string]string{}
	for i := range 33 {
		big[string(rune('a'+i%26))+strings.Repeat("k", i)] = "v"
	}
	if _, err := v.Create(ctx, "alice", "many", "v", big); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("33 metadata entries: %v", err)
	}
	// A deleted and re-created secret has a new ID.
	if err := v.Delete(ctx, "alice", "openai-key"); err != nil {
		t.Fatal(err)
	}
	if again, err := v.Create(ctx, "alice", "openai-key", "v", nil); err != nil || again.ID == m.ID || again.Version != 1 {
		t.Fatalf("re-created: %+v %v", again, err)
	}
}
