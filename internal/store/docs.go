package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Docs keeps small documents of protocol front-ends beside the sandbox
// records, in the same store: agentscope's records of its sandboxes (their
// session bindings, and released, recycled and replaced ones that outlive
// their sandbox). In Redis every replica sees them; in bbolt they survive
// a restart. Each document is a member of one group (agentscope: its
// owner), fixed when it is first written, so a group's documents are
// listed without a scan of every document.
type Docs interface {
	// Doc returns the document kind/key, nil when there is none (or it
	// expired).
	Doc(ctx context.Context, kind, key string) ([]byte, error)
	// UpdateDoc replaces the document kind/key of group by change(old), in
	// one atomic step against other writers, replicas included (old is nil
	// when there is none). change returns the new document (nil: delete
	// it) and how long it lives (0: until it is deleted); an error from
	// change leaves the document as it was and is returned. change may run
	// more than once (when another writer won a race).
	UpdateDoc(ctx context.Context, kind, group, key string, change func(old []byte) ([]byte, time.Duration, error)) error
	// GroupDocs returns the live documents of group.
	GroupDocs(ctx context.Context, kind, group string) ([][]byte, error)
}

// DocPruner is a Docs whose expired documents stay until they are met or
// pruned (bbolt, memory; Redis expires them itself).
type DocPruner interface {
	// PruneDocs deletes the expired documents of kind and returns how many.
	PruneDocs(ctx context.Context, kind string) (int, error)
}

var (
	_ Docs      = (*Memory)(nil)
	_ Docs      = (*Bolt)(nil)
	_ Docs      = (*Redis)(nil)
	_ DocPruner = (*Memory)(nil)
	_ DocPruner = (*Bolt)(nil)
)

// PruneDocs implements DocPruner.
func (m *Memory) PruneDocs(_ context.Context, kind string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now, n := time.Now(), 0
	for k, d := range m.docs {
		if strings.HasPrefix(k, kind+"\x00") && d.expired(now) {
			delete(m.docs, k)
			n++
		}
	}
	return n, nil
}

// PruneDocs implements DocPruner: one write transaction over the kind's
// documents.
func (b *Bolt) PruneDocs(_ context.Context, kind string) (int, error) {
	n := 0
	prefix := []byte(kind + "\x00")
	err := b.db.Update(func(tx *bolt.Tx) error {
		docs, groups := tx.Bucket(bucketDocs), tx.Bucket(bucketDocGroups)
		if docs == nil || groups == nil {
			return nil
		}
		now := time.Now()
		var expired [][]byte
		c := docs.Cursor()
		for k, v := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, v = c.Next() {
			d := &boltDoc{}
			if json.Unmarshal(v, d) != nil || d.expired(now) {
				expired = append(expired, append([]byte(nil), k...))
				if d.Group != "" || d.Data != nil {
					_ = groups.Delete([]byte(docKey(kind, d.Group, string(k[len(prefix):]))))
				}
			}
		}
		for _, k := range expired {
			if err := docs.Delete(k); err != nil {
				return err
			}
		}
		n = len(expired)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("prune documents %s: %w", kind, err)
	}
	return n, nil
}

// docKey joins a kind and a key (or group) into one map or bucket key.
func docKey(parts ...string) string { return strings.Join(parts, "\x00") }

// memDoc is a document of the in-memory store.
type memDoc struct {
	group string
	data  []byte
	exp   time.Time // zero: never
}

func (d memDoc) expired(now time.Time) bool { return !d.exp.IsZero() && !now.Before(d.exp) }

func expiry(now time.Time, ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return now.Add(ttl)
}

// Doc implements Docs.
func (m *Memory) Doc(_ context.Context, kind, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.docs[docKey(kind, key)]
	if !ok || d.expired(time.Now()) {
		return nil, nil
	}
	return append([]byte(nil), d.data...), nil
}

// UpdateDoc implements Docs.
func (m *Memory) UpdateDoc(_ context.Context, kind, group, key string, change func(old []byte) ([]byte, time.Duration, error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := docKey(kind, key)
	var old []byte
	now := time.Now()
	if d, ok := m.docs[k]; ok && !d.expired(now) {
		old = append([]byte(nil), d.data...)
	}
	next, ttl, err := change(old)
	if err != nil {
		return err
	}
	if next == nil {
		delete(m.docs, k)
		return nil
	}
	if m.docs == nil {
		m.docs = map[string]memDoc{}
	}
	m.docs[k] = memDoc{group: group, data: append([]byte(nil), next...), exp: expiry(now, ttl)}
	return nil
}

// GroupDocs implements Docs (a scan: the in-memory store is for tests).
func (m *Memory) GroupDocs(_ context.Context, kind, group string) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out [][]byte
	for k, d := range m.docs {
		if !strings.HasPrefix(k, kind+"\x00") {
			continue
		}
		if d.expired(now) {
			delete(m.docs, k)
			continue
		}
		if d.group == group {
			out = append(out, append([]byte(nil), d.data...))
		}
	}
	return out, nil
}

// Bolt keeps documents in bucket "docs" (KIND\0KEY -> boltDoc) and their
// group index in "docgroups" (KIND\0GROUP\0KEY -> empty).
var (
	bucketDocs      = []byte("docs")
	bucketDocGroups = []byte("docgroups")
)

// boltDoc is a document as bbolt holds it.
type boltDoc struct {
	Group string `json:"g"`
	Exp   int64  `json:"e,omitempty"` // unix nanoseconds; 0: never
	Data  []byte `json:"d"`
}

func (d *boltDoc) expired(now time.Time) bool { return d.Exp != 0 && now.UnixNano() >= d.Exp }

func readBoltDoc(b *bolt.Bucket, k []byte) *boltDoc {
	v := b.Get(k)
	if v == nil {
		return nil
	}
	d := &boltDoc{}
	if json.Unmarshal(v, d) != nil {
		return nil // a damaged value is replaced by the next write
	}
	return d
}

// Doc implements Docs.
func (b *Bolt) Doc(_ context.Context, kind, key string) ([]byte, error) {
	var out []byte
	err := b.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketDocs)
		if bk == nil {
			return nil
		}
		if d := readBoltDoc(bk, []byte(docKey(kind, key))); d != nil && !d.expired(time.Now()) {
			out = d.Data
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read document %s/%s: %w", kind, key, err)
	}
	return out, nil
}

// UpdateDoc implements Docs.
func (b *Bolt) UpdateDoc(_ context.Context, kind, group, key string, change func(old []byte) ([]byte, time.Duration, error)) error {
	err := b.db.Update(func(tx *bolt.Tx) error {
		docs, err := tx.CreateBucketIfNotExists(bucketDocs)
		if err != nil {
			return err
		}
		groups, err := tx.CreateBucketIfNotExists(bucketDocGroups)
		if err != nil {
			return err
		}
		k := []byte(docKey(kind, key))
		now := time.Now()
		prev := readBoltDoc(docs, k)
		var old []byte
		if prev != nil && !prev.expired(now) {
			old = prev.Data
		}
		next, ttl, err := change(old)
		if err != nil {
			return err
		}
		if prev != nil && (next == nil || prev.Group != group) {
			if err := groups.Delete([]byte(docKey(kind, prev.Group, key))); err != nil {
				return err
			}
		}
		if next == nil {
			return docs.Delete(k)
		}
		d := boltDoc{Group: group, Data: next}
		if exp := expiry(now, ttl); !exp.IsZero() {
			d.Exp = exp.UnixNano()
		}
		v, err := json.Marshal(d)
		if err != nil {
			return err
		}
		if err := docs.Put(k, v); err != nil {
			return err
		}
		return groups.Put([]byte(docKey(kind, group, key)), nil)
	})
	if err != nil {
		var se *sandbox.Error
		if errors.As(err, &se) {
			return err
		}
		return fmt.Errorf("write document %s/%s: %w", kind, key, err)
	}
	return nil
}

// GroupDocs implements Docs; expired documents it meets are deleted.
func (b *Bolt) GroupDocs(_ context.Context, kind, group string) ([][]byte, error) {
	var out [][]byte
	var expired [][]byte // group index keys
	now := time.Now()
	prefix := []byte(docKey(kind, group) + "\x00")
	err := b.db.View(func(tx *bolt.Tx) error {
		docs, groups := tx.Bucket(bucketDocs), tx.Bucket(bucketDocGroups)
		if docs == nil || groups == nil {
			return nil
		}
		c := groups.Cursor()
		for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Next() {
			key := string(k[len(prefix):])
			d := readBoltDoc(docs, []byte(docKey(kind, key)))
			switch {
			case d == nil || d.Group != group:
				expired = append(expired, append([]byte(nil), k...))
			case d.expired(now):
				expired = append(expired, append([]byte(nil), k...))
			default:
				out = append(out, d.Data)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list documents %s of %q: %w", kind, group, err)
	}
	if len(expired) > 0 {
		// Checked again in the write: one written meanwhile stays.
		_ = b.db.Update(func(tx *bolt.Tx) error {
			docs, groups := tx.Bucket(bucketDocs), tx.Bucket(bucketDocGroups)
			now := time.Now()
			for _, k := range expired {
				dk := []byte(docKey(kind, string(k[len(prefix):])))
				d := readBoltDoc(docs, dk)
				if d != nil && d.Group == group && !d.expired(now) {
					continue
				}
				if d != nil && d.Group == group {
					_ = docs.Delete(dk)
				}
				_ = groups.Delete(k)
			}
			return nil
		})
	}
	return out, nil
}

// Redis keys: PREFIX:doc:KIND:KEY (the document, with its time to live)
// and PREFIX:docs:KIND:GROUP (a set of the group's keys; members whose
// document expired are dropped when the group is listed).
func (r *Redis) docKey(kind, key string) string { return r.prefix + ":doc:" + kind + ":" + key }
func (r *Redis) docGroupKey(kind, group string) string {
	return r.prefix + ":docs:" + kind + ":" + group
}

// Doc implements Docs.
func (r *Redis) Doc(ctx context.Context, kind, key string) ([]byte, error) {
	data, err := r.c.Get(ctx, r.docKey(kind, key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, r.unavailable("read "+kind+" document", err)
	}
	return data, nil
}

// UpdateDoc implements Docs: one optimistic transaction on the document,
// recomputed when another replica changed it meanwhile.
func (r *Redis) UpdateDoc(ctx context.Context, kind, group, key string, change func(old []byte) ([]byte, time.Duration, error)) error {
	k := r.docKey(kind, key)
	for attempt := 0; attempt < maxTxAttempts; attempt++ {
		err := r.c.Watch(ctx, func(tx *redis.Tx) error {
			old, err := tx.Get(ctx, k).Bytes()
			if errors.Is(err, redis.Nil) {
				old, err = nil, nil
			}
			if err != nil {
				return err
			}
			next, ttl, err := change(old)
			if err != nil {
				return changeErr{err}
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				if next == nil {
					p.Del(ctx, k)
					p.SRem(ctx, r.docGroupKey(kind, group), key)
					return nil
				}
				p.Set(ctx, k, next, max(ttl, 0))
				p.SAdd(ctx, r.docGroupKey(kind, group), key)
				return nil
			})
			return err
		}, k)
		if errors.Is(err, redis.TxFailedErr) {
			backoff(attempt)
			continue
		}
		var ce changeErr
		if errors.As(err, &ce) {
			return ce.err
		}
		if err != nil {
			return r.unavailable("write "+kind+" document", err)
		}
		return nil
	}
	return sandbox.Errorf(sandbox.ClassUnavailable, "%s document %s too contended; retry", kind, key)
}

// changeErr carries the error of an UpdateDoc change through the
// transaction, told apart from Redis failures.
type changeErr struct{ err error }

func (e changeErr) Error() string { return e.err.Error() }

// GroupDocs implements Docs.
func (r *Redis) GroupDocs(ctx context.Context, kind, group string) ([][]byte, error) {
	set := r.docGroupKey(kind, group)
	keys, err := r.c.SMembers(ctx, set).Result()
	if err != nil {
		return nil, r.unavailable("list "+kind+" documents", err)
	}
	var out [][]byte
	var gone []string
	const batch = 256
	for len(keys) > 0 {
		n := min(batch, len(keys))
		full := make([]string, n)
		for i, k := range keys[:n] {
			full[i] = r.docKey(kind, k)
		}
		vals, err := r.c.MGet(ctx, full...).Result()
		if err != nil {
			return nil, r.unavailable("list "+kind+" documents", err)
		}
		for i, v := range vals {
			if s, ok := v.(string); ok {
				out = append(out, []byte(s))
			} else {
				gone = append(gone, keys[i]) // expired
			}
		}
		keys = keys[n:]
	}
	if len(gone) > 0 {
		r.dropGone(ctx, kind, set, gone)
	}
	return out, nil
}

// dropGone removes from a group's set the keys whose document expired,
// unless one was written again meanwhile (checked in one transaction; a
// lost race leaves them to the next listing).
func (r *Redis) dropGone(ctx context.Context, kind, set string, gone []string) {
	full := make([]string, len(gone))
	for i, k := range gone {
		full[i] = r.docKey(kind, k)
	}
	_ = r.c.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Exists(ctx, full...).Result()
		if err != nil || n != 0 {
			return err // one came back: leave them all to the next listing
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			members := make([]any, len(gone))
			for i, k := range gone {
				members[i] = k
			}
			p.SRem(ctx, set, members...)
			return nil
		})
		return err
	}, full...)
}
