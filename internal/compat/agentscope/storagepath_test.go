package agentscope

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func storageServer(t *testing.T) (*Server, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "storage")
	return &Server{cfg: Config{StorageFolder: dir}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}, dir
}

// TestSecurityStoragePathOwner: a caller's storage_path resolves only
// inside the caller's own area of STORAGE_FOLDER.
func TestSecurityStoragePathOwner(t *testing.T) {
	s, dir := storageServer(t)
	alice := filepath.Join(dir, "alice")
	ok := map[string]string{
		"ws":                                 filepath.Join(alice, "ws"),
		"a/b":                                filepath.Join(alice, "a", "b"),
		"bob/x":                              filepath.Join(alice, "bob", "x"),
		filepath.Join(alice, "ws"):           filepath.Join(alice, "ws"),
		filepath.Join(alice, "a", "..", "w"): filepath.Join(alice, "w"),
	}
	for in, want := range ok {
		if got, err := s.resolveStoragePath("alice", in); err != nil || got != want {
			t.Errorf("resolve %q = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../bob/x", "a/../../bob/x", ".", "/etc", dir, alice,
		filepath.Join(dir, "bob", "x"), filepath.Join(alice, "..", "bob", "x"), "x.saving", "a\x00b"} {
		if got, err := s.resolveStoragePath("alice", in); err == nil {
			t.Errorf("resolve %q = %q, want an error", in, got)
		}
	}
	// Owner names that are not plain words cannot climb out either.
	for _, owner := range []string{"..", "../bob", "a/b", "", "."} {
		if n := ownerStorageName(owner); !filepath.IsLocal(n) || filepath.Dir(n) != "." || n == ".." || n == "." {
			t.Errorf("owner %q has storage directory %q", owner, n)
		}
	}
	if ownerStorageName("a/b") == ownerStorageName("a_b") {
		t.Error("distinct owners share a storage directory")
	}
}

// TestSecurityStorageLayoutMigration: copies of the earlier flat layout
// have no owner: they are moved aside once, so an owner whose name equals
// one of them does not get it, and a live sandbox's own copy goes back to
// its owner.
func TestSecurityStorageLayoutMigration(t *testing.T) {
	s, dir := storageServer(t)
	for _, d := range []string{"bob", "sb1"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "f"), []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.migrateStorage(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bob", "f")); err == nil {
		t.Fatal("a legacy copy is still where owner bob's area is")
	}
	if b, err := os.ReadFile(filepath.Join(dir, legacyStorageDir, "bob", "f")); err != nil || string(b) != "bob" {
		t.Fatalf("legacy copy not kept aside: %q %v", b, err)
	}
	// Once laid out, a second start moves nothing.
	if err := os.MkdirAll(filepath.Join(dir, "carol", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.migrateStorage(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "carol", "x")); err != nil {
		t.Fatalf("second migration moved an owner's area: %v", err)
	}
	// A live sandbox of alice's is adopted after a restart: its copy
	// follows it; a recorded path outside her area is replaced.
	if got, want := s.adoptStorage("alice", "sb1", ""), filepath.Join(dir, "alice", "sb1"); got != want {
		t.Fatalf("adopted storage %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "alice", "sb1", "f")); err != nil || string(b) != "sb1" {
		t.Fatalf("live sandbox's copy not moved to its owner: %q %v", b, err)
	}
	if got, want := s.adoptStorage("alice", "sb2", filepath.Join(dir, "carol", "x")), filepath.Join(dir, "alice", "sb2"); got != want {
		t.Fatalf("adopted foreign storage %q, want %q", got, want)
	}
}

// TestSecurityStorageRootSymlink: a symlink in an owner's area that points
// at another owner's area is not followed.
func TestSecurityStorageRootSymlink(t *testing.T) {
	s, dir := storageServer(t)
	if err := os.MkdirAll(filepath.Join(dir, "bob", "ws"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "alice"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "bob"), filepath.Join(dir, "alice", "link")); err != nil {
		t.Fatal(err)
	}
	r := &record{Owner: "alice", Storage: filepath.Join(dir, "alice", "link", "ws")}
	area, rel, err := s.storageRoot(r)
	if err != nil {
		t.Fatal(err)
	}
	defer area.Close()
	if _, err := area.OpenRoot(rel); err == nil {
		t.Fatal("opened another owner's copy through a symlink")
	}
	if err := area.RemoveAll(rel); err == nil {
		if _, serr := os.Stat(filepath.Join(dir, "bob", "ws")); serr != nil {
			t.Fatal("removed another owner's copy through a symlink")
		}
	}
}
