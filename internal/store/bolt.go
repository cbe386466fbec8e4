package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentbox/agentbox/internal/sandbox"
)

var bucketSandboxes = []byte("sandboxes")

// Bolt is a Store in an embedded bbolt file: no server, crash-safe writes.
type Bolt struct {
	db *bolt.DB
}

var _ Store = (*Bolt)(nil)

// OpenBolt opens (creating if needed) the database file at path. Only one
// process may have it open: a second daemon on the same data dir fails here
// instead of fighting over sandboxes.
//
// Writes are not fsynced. The records matter across daemon restarts, which
// keep the page cache; a host crash loses them, but it also kills every
// sandbox they describe. So a database left unreadable by a crash is moved
// aside and a fresh one started, rather than failing the daemon for ever.
// Skipping fsync takes ~10 ms off every create on an ordinary disk.
func OpenBolt(path string) (*Bolt, error) {
	opts := &bolt.Options{Timeout: 2 * time.Second, NoSync: true, NoGrowSync: true, NoFreelistSync: true}
	db, err := bolt.Open(path, 0o600, opts)
	if err != nil && !errors.Is(err, bolt.ErrTimeout) && fileExists(path) {
		aside := fmt.Sprintf("%s.corrupt-%d", path, time.Now().Unix())
		if rerr := os.Rename(path, aside); rerr == nil {
			slog.Warn("store unreadable (host crash?); starting a fresh one", "path", path, "moved_to", aside, "err", err)
			db, err = bolt.Open(path, 0o600, opts)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s (is another agentbox using this data dir?): %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketSandboxes)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("init store: %w", err)
	}
	return &Bolt{db: db}, nil
}

// Put implements Store.
func (b *Bolt) Put(_ context.Context, r *Record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record %s: %w", r.ID, err)
	}
	// Update, not Batch: without fsync a transaction is cheap, and Batch
	// would hold every write back up to its 10 ms coalescing window.
	err = b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).Put([]byte(r.ID), data)
	})
	if err != nil {
		return fmt.Errorf("store record %s: %w", r.ID, err)
	}
	return nil
}

// Get implements Store.
func (b *Bolt) Get(_ context.Context, id sandbox.ID) (*Record, error) {
	var r *Record
	err := b.db.View(func(tx *bolt.Tx) error {
		data := tx.Bucket(bucketSandboxes).Get([]byte(id))
		if data == nil {
			return sandbox.ErrNotFound(id)
		}
		r = &Record{}
		return json.Unmarshal(data, r)
	})
	return r, err
}

// Delete implements Store.
func (b *Bolt) Delete(_ context.Context, id sandbox.ID) error {
	err := b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("delete record %s: %w", id, err)
	}
	return nil
}

// List implements Store.
func (b *Bolt) List(_ context.Context) ([]*Record, error) {
	var out []*Record
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			r := &Record{}
			if err := json.Unmarshal(v, r); err != nil {
				return fmt.Errorf("decode record %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// Close implements Store.
func (b *Bolt) Close() error { return b.db.Close() }

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
