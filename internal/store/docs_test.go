package store

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

func put(doc string, ttl time.Duration) func([]byte) ([]byte, time.Duration, error) {
	return func([]byte) ([]byte, time.Duration, error) {
		if doc == "" {
			return nil, 0, nil
		}
		return []byte(doc), ttl, nil
	}
}

func groupDocs(t *testing.T, d Docs, group string) []string {
	t.Helper()
	docs, err := d.GroupDocs(context.Background(), "k", group)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(docs))
	for i, b := range docs {
		out[i] = string(b)
	}
	sort.Strings(out)
	return out
}

// testDocs is the Docs contract: a and b are two views of one store (two
// replicas' clients on Redis, the same instance otherwise).
func testDocs(t *testing.T, a, b Docs) {
	ctx := context.Background()
	if got, err := a.Doc(ctx, "k", "x"); got != nil || err != nil {
		t.Fatalf("missing doc: %q %v", got, err)
	}
	for key, group := range map[string]string{"x": "alice", "y": "alice", "z": "bob"} {
		if err := a.UpdateDoc(ctx, "k", group, key, put(key+"-1", 0)); err != nil {
			t.Fatal(err)
		}
	}
	// Another kind is another namespace.
	if err := a.UpdateDoc(ctx, "other", "alice", "x", put("other", 0)); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Doc(ctx, "k", "x"); string(got) != "x-1" || err != nil {
		t.Fatalf("doc through the other view: %q %v", got, err)
	}
	if got := groupDocs(t, b, "alice"); len(got) != 2 || got[0] != "x-1" || got[1] != "y-1" {
		t.Fatalf("alice's docs: %q", got)
	}
	// A change that fails leaves the document.
	boom := errors.New("boom")
	if err := b.UpdateDoc(ctx, "k", "alice", "x", func(old []byte) ([]byte, time.Duration, error) {
		return []byte("never"), 0, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("change error: %v", err)
	}
	if got, _ := a.Doc(ctx, "k", "x"); string(got) != "x-1" {
		t.Fatalf("after a failed change: %q", got)
	}
	// Deleting takes it out of its group.
	if err := b.UpdateDoc(ctx, "k", "alice", "y", put("", 0)); err != nil {
		t.Fatal(err)
	}
	if got := groupDocs(t, a, "alice"); len(got) != 1 || got[0] != "x-1" {
		t.Fatalf("after delete: %q", got)
	}
	// 2 × 16 concurrent read-modify-writes of one counter: none is lost.
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for _, d := range []Docs{a, b} {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- d.UpdateDoc(ctx, "k", "bob", "counter", func(old []byte) ([]byte, time.Duration, error) {
					c, _ := strconv.Atoi(string(old))
					return []byte(strconv.Itoa(c + 1)), 0, nil
				})
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := b.Doc(ctx, "k", "counter"); string(got) != strconv.Itoa(2*n) {
		t.Fatalf("counter after 2 × %d increments: %q", n, got)
	}
	// A document with a time to live goes, from Doc and from its group.
	if err := a.UpdateDoc(ctx, "k", "carol", "short", put("short", 50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := a.UpdateDoc(ctx, "k", "carol", "long", put("long", time.Hour)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := b.Doc(ctx, "k", "short")
		if err != nil {
			t.Fatal(err)
		}
		if got == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a document with a 50 ms time to live is still there after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := groupDocs(t, b, "carol"); len(got) != 1 || got[0] != "long" {
		t.Fatalf("carol's docs after one expired: %q", got)
	}
	// Written again after it expired, it is listed again.
	if err := b.UpdateDoc(ctx, "k", "carol", "short", put("again", 0)); err != nil {
		t.Fatal(err)
	}
	if got := groupDocs(t, a, "carol"); len(got) != 2 || got[0] != "again" {
		t.Fatalf("carol's docs after a rewrite: %q", got)
	}
}

func TestMemoryDocs(t *testing.T) {
	m := NewMemory()
	testDocs(t, m, m)
}

func TestBoltDocs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	testDocs(t, s, s)
	s.Close()
	// Documents survive a reopen (and the damage check reads them).
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Doc(context.Background(), "k", "x"); string(got) != "x-1" || err != nil {
		t.Fatalf("after reopen: %q %v", got, err)
	}
}

func TestRedisDocs(t *testing.T) {
	srv := testutil.StartRedis(t)
	testDocs(t, openRedis(t, srv), openRedis(t, srv))
}

// Expired documents go from bbolt and memory when pruned, and only those.
func TestPruneDocs(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for name, d := range map[string]interface {
		Docs
		DocPruner
	}{"memory": NewMemory(), "bolt": b} {
		ctx := context.Background()
		if err := d.UpdateDoc(ctx, "k", "g", "short", put("short", 10*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := d.UpdateDoc(ctx, "k", "g", "long", put("long", 0)); err != nil {
			t.Fatal(err)
		}
		if err := d.UpdateDoc(ctx, "other", "g", "short", put("other", 10*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got, _ := d.Doc(ctx, "k", "short"); got == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not expired after 10 s", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n, err := d.PruneDocs(ctx, "k"); err != nil || n != 1 {
			t.Fatalf("%s: pruned %d, %v", name, n, err)
		}
		if n, _ := d.PruneDocs(ctx, "k"); n != 0 {
			t.Fatalf("%s: pruned %d more", name, n)
		}
		if got := groupDocs(t, d, "g"); len(got) != 1 || got[0] != "long" {
			t.Fatalf("%s: after prune: %q", name, got)
		}
	}
}
