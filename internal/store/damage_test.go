package store

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// damagedStore writes n records to a fresh store file and closes it.
func damagedStore(t *testing.T, n int) (string, []sandbox.ID) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agentbox.db")
	b, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []sandbox.ID
	for range n {
		id := sandbox.NewID()
		ids = append(ids, id)
		if err := b.Put(context.Background(), &Record{ID: id, Owner: "alice", Metadata: map[string]string{"pad": string(make([]byte, 300))}}); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	return path, ids
}

// TestBoltUndecodableRecord: a record that is not JSON is dropped (with a
// backup of the file), every other record still loads.
func TestBoltUndecodableRecord(t *testing.T) {
	path, ids := damagedStore(t, 3)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSandboxes).Put([]byte(ids[1]), []byte("{torn")) })
	db.Close()
	b, err := OpenBolt(path)
	if err != nil {
		t.Fatalf("open with an undecodable record: %v", err)
	}
	defer b.Close()
	recs, err := b.List(context.Background())
	if err != nil || len(recs) != 2 {
		t.Fatalf("list: %d records, %v; want the 2 intact ones", len(recs), err)
	}
	if m, _ := filepath.Glob(path + ".bad-records-*"); len(m) != 1 {
		t.Fatalf("no backup of the store before dropping: %v", m)
	}
}

// TestBoltDamagedFile: a truncated file, or one with pages overwritten,
// never stops the store from opening (nor panics): the file is moved
// aside and the records that still read are kept.
func TestBoltDamagedFile(t *testing.T) {
	for _, how := range []string{"truncated", "pages", "header"} {
		t.Run(how, func(t *testing.T) {
			path, ids := damagedStore(t, 40)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			switch how {
			case "truncated":
				data = data[:len(data)/2]
			case "pages":
				for i := 4 * 4096; i < len(data) && i < 12*4096; i++ {
					data[i] = byte(r.Uint32())
				}
			case "header":
				for i := 0; i < 2*4096; i++ {
					data[i] = byte(r.Uint32())
				}
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			b, err := OpenBolt(path)
			if err != nil {
				t.Fatalf("open a %s store: %v", how, err)
			}
			defer b.Close()
			recs, err := b.List(context.Background())
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			if len(recs) > len(ids) {
				t.Fatalf("%d records from %d", len(recs), len(ids))
			}
			if err := b.Put(context.Background(), &Record{ID: sandbox.NewID()}); err != nil {
				t.Fatalf("write after recovery: %v", err)
			}
			t.Logf("%s: %d of %d records kept", how, len(recs), len(ids))
		})
	}
}
