package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func testStore(t *testing.T, s Store) {
	ctx := context.Background()
	r := &Record{ID: "abc", Owner: "alice", Template: "host", EndAt: time.Now().Add(time.Minute).UTC().Round(0),
		Metadata: map[string]string{"k": "v"}, AccessToken: "tok"}
	if err := s.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.Metadata["k"] = "changed after put"
	got, err := s.Get(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "alice" || got.Metadata["k"] != "v" || got.AccessToken != "tok" || !got.EndAt.Equal(r.EndAt) {
		t.Fatalf("got %+v", got)
	}
	if _, err := s.Get(ctx, "missing"); !sandbox.IsNotFound(err) {
		t.Fatalf("get missing: %v", err)
	}
	if err := s.Put(ctx, &Record{ID: "def", Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	all, err := s.List(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("list = %d, %v", len(all), err)
	}
	if err := s.Delete(ctx, "abc"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "abc"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	all, _ = s.List(ctx)
	if len(all) != 1 || all[0].ID != "def" {
		t.Fatalf("after delete: %+v", all)
	}
}

func TestMemory(t *testing.T) { testStore(t, NewMemory()) }

func TestBolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	testStore(t, s)
	// A second open of the same file fails fast instead of sharing it.
	if _, err := OpenBolt(path); err == nil {
		t.Fatal("second open of a locked store succeeded")
	}
	s.Close()
	// Records survive a reopen.
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Get(context.Background(), "def"); err != nil || r.Owner != "bob" {
		t.Fatalf("after reopen: %+v %v", r, err)
	}
}

func TestBoltReplacesCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(path, []byte("this is not a bolt database, just garbage bytes of a crash"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatalf("corrupt store not replaced: %v", err)
	}
	defer s.Close()
	if err := s.Put(context.Background(), &Record{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	matches, _ := filepath.Glob(path + ".corrupt-*")
	if len(matches) != 1 {
		t.Fatalf("corrupt file not kept aside: %v", matches)
	}
}
