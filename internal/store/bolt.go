package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

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
	db, err := openChecked(path)
	if err != nil && !errors.Is(err, berrors.ErrTimeout) && fileExists(path) {
		// Unreadable, or inconsistent pages: keep the file for a person to
		// look at, salvage the records that still read, start afresh.
		salvaged := salvage(path)
		aside := fmt.Sprintf("%s.corrupt-%d", path, time.Now().Unix())
		if rerr := os.Rename(path, aside); rerr == nil {
			db, err = openChecked(path)
			if err == nil {
				err = restore(db, salvaged)
			}
			slog.Warn("store damaged (host crash or disk fault?): moved aside, started a fresh one with the records that still read",
				"path", path, "moved_to", aside, "records_salvaged", len(salvaged), "cause", err)
		}
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		return nil, fmt.Errorf("open store %s (is another agentbox using this data dir?): %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		// Leases (lease.go) live no longer than the process that opened
		// the file, the only one that can: a holder that died with the
		// previous daemon must not keep its names for their time to live.
		if err := tx.DeleteBucket(bucketLeases); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketSandboxes)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("init store: %w", err)
	}
	b := &Bolt{db: db}
	if err := b.dropUndecodable(path); err != nil {
		db.Close()
		return nil, err
	}
	return b, nil
}

var boltOptions = &bolt.Options{Timeout: 2 * time.Second, NoSync: true, NoGrowSync: true, NoFreelistSync: true}

// openChecked reads every record of the file before opening it for
// writing. bbolt trusts its file: a damaged page makes it panic, and a
// truncated file makes the kernel send SIGBUS when a page past its end is
// touched through the mapping — both fatal for the daemon, at every start.
// The walk runs read-only on this goroutine with faults turned into panics
// (debug.SetPanicOnFault) and recovers them. Only when it passes is the
// file opened for writing (bbolt then rebuilds its freelist walking the
// same pages, on a goroutine of its own where nothing could be recovered).
func openChecked(path string) (*bolt.DB, error) {
	if _, err := readRecords(path); err != nil {
		return nil, err
	}
	var db *bolt.DB
	err := catch(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, boltOptions)
		return err
	})
	return db, err
}

// readRecords returns the record values of a store file, read-only; an
// error (a recovered panic or memory fault included) means the file is
// damaged. The values that read before the damage are returned too.
func readRecords(path string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return out, nil // a new store
	}
	err := catch(func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: true})
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bolt.Tx) error {
			// Front-ends' documents (docs.go) are read too, so damage
			// there is found here rather than in a panic later; only the
			// records are salvaged.
			sum := 0
			for _, name := range [][]byte{bucketDocs, bucketDocGroups, bucketLeases} {
				if b := tx.Bucket(name); b != nil {
					if err := b.ForEach(func(k, v []byte) error {
						if len(v) > 0 {
							sum += int(v[len(v)-1]) // touch the value's last page
						}
						return nil
					}); err != nil {
						return err
					}
				}
			}
			_ = sum
			b := tx.Bucket(bucketSandboxes)
			if b == nil {
				return nil
			}
			return b.ForEach(func(k, v []byte) error {
				out[string(k)] = append([]byte(nil), v...)
				return nil
			})
		})
	})
	if err != nil && !errors.Is(err, berrors.ErrTimeout) {
		err = fmt.Errorf("store file is damaged: %w", err)
	}
	return out, err
}

// catch runs fn with memory faults turned into panics, and panics into
// errors.
func catch(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return fn()
}

// salvage reads what records it can from a damaged file: the values that
// are JSON, up to the first unreadable page.
func salvage(path string) map[string][]byte {
	recs, _ := readRecords(path)
	for k, v := range recs {
		if !json.Valid(v) {
			delete(recs, k)
		}
	}
	return recs
}

// restore writes salvaged records into a fresh store.
func restore(db *bolt.DB, recs map[string][]byte) error {
	return db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketSandboxes)
		if err != nil {
			return err
		}
		for k, v := range recs {
			if err := b.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// dropUndecodable removes records that are not valid JSON of a Record (a
// torn write, a disk fault): one bad record must not stop every other
// sandbox from being reattached. A copy of the file is kept first.
func (b *Bolt) dropUndecodable(path string) error {
	var bad [][]byte
	_ = b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			var r Record
			if json.Unmarshal(v, &r) != nil || r.ID == "" || string(r.ID) != string(k) {
				bad = append(bad, append([]byte(nil), k...))
			}
			return nil
		})
	})
	if len(bad) == 0 {
		return nil
	}
	backup := fmt.Sprintf("%s.bad-records-%d", path, time.Now().Unix())
	if err := b.db.View(func(tx *bolt.Tx) error { return tx.CopyFile(backup, 0o600) }); err != nil {
		return fmt.Errorf("back up the store before dropping %d undecodable records: %w", len(bad), err)
	}
	if err := b.db.Update(func(tx *bolt.Tx) error {
		for _, k := range bad {
			if err := tx.Bucket(bucketSandboxes).Delete(k); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("drop undecodable records: %w", err)
	}
	names := make([]string, len(bad))
	for i, k := range bad {
		names[i] = fmt.Sprintf("%q", k)
	}
	slog.Warn("store held records that do not decode: dropped them (their sandboxes are cleaned up like any without a record)",
		"path", path, "records", names, "backup", backup)
	return nil
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
