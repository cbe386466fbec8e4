package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// RedisConfig says where the shared state lives.
type RedisConfig struct {
	Addr     string // host:port
	DB       int
	Username string
	Password string
	// KeyPrefix starts every key of records and nodes (default
	// REDIS_KEY_PREFIX's),
	// so several deployments can share one Redis database.
	KeyPrefix string
	// PoolKey starts the keys of warm-pool membership, one set per pool
	// (agentscope's REDIS_CONTAINER_POOL_KEY).
	PoolKey string
	// Timeout bounds dialing and each command (default REDIS_TIMEOUT's): with Redis
	// down, requests that need state fail within it instead of hanging.
	Timeout time.Duration
}

// Redis is a Store shared by several daemons. Besides the records it keeps
// index sets (all sandboxes, each owner's, each pool's members), updated in
// the same transaction as the record, so counts for quotas and pool takes
// are atomic across replicas.
//
// Keys: PREFIX:sandbox:ID (the record as JSON), PREFIX:sandboxes (set of
// IDs), PREFIX:owner:OWNER (the owner's handed-out sandboxes),
// POOLKEY:POOL (pooled sandboxes waiting in POOL), PREFIX:expiring:ID (an
// expiry claim), PREFIX:node:ID and PREFIX:nodes (the node registry).
type Redis struct {
	c       *redis.Client
	prefix  string
	poolKey string
}

var (
	_ Store  = (*Redis)(nil)
	_ Atomic = (*Redis)(nil)
)

// maxTxAttempts bounds the optimistic-transaction retries of one write:
// WATCH fails when another replica changed a watched key, and the write is
// recomputed from the new state.
const maxTxAttempts = 200

// OpenRedis connects and checks the server answers.
func OpenRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = string(redisDefaults.KeyPrefix)
	}
	if cfg.PoolKey == "" {
		cfg.PoolKey = string(redisDefaults.PoolKey)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = redisDefaults.Timeout
	}
	c := redis.NewClient(&redis.Options{
		Addr: cfg.Addr, DB: cfg.DB, Username: cfg.Username, Password: cfg.Password,
		DialTimeout: cfg.Timeout, ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout,
		PoolTimeout: cfg.Timeout, ContextTimeoutEnabled: true,
		// One retry covers a connection the server closed while idle; more
		// would only delay the 503 when Redis is really down.
		MaxRetries: 1,
		// No client-side identity or maintenance commands a locked-down
		// Redis (ACL user) may refuse.
		DisableIndentity: true,
	})
	r := &Redis{c: c, prefix: cfg.KeyPrefix, poolKey: cfg.PoolKey}
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, r.unavailable(fmt.Sprintf("connect to Redis at %s", cfg.Addr), err)
	}
	return r, nil
}

func (r *Redis) recKey(id sandbox.ID) string  { return r.prefix + ":sandbox:" + string(id) }
func (r *Redis) allKey() string               { return r.prefix + ":sandboxes" }
func (r *Redis) ownerKey(owner string) string { return r.prefix + ":owner:" + owner }

// poolSetKey is the set of node's sandboxes waiting in pool: pools are
// per daemon (a pooled sandbox runs where it was booted, and only that
// daemon can personalise it). Records without a node (written before node
// names) keep the shared key.
func (r *Redis) poolSetKey(node, pool string) string {
	if node == "" {
		return r.poolKey + ":" + pool
	}
	return r.poolKey + ":" + node + ":" + pool
}
func (r *Redis) expiringKey(id sandbox.ID) string { return r.prefix + ":expiring:" + string(id) }

// unavailable turns a Redis failure into a ClassUnavailable error (503):
// the state store is down, the request may be retried later.
func (r *Redis) unavailable(op string, err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return err
	}
	return sandbox.Wrap(sandbox.ClassUnavailable, err, "state store (Redis) unavailable: "+op)
}

// Put implements Store.
func (r *Redis) Put(ctx context.Context, rec *Record) error {
	return r.update(ctx, rec.ID, nil, func(*redis.Tx, *Record) (*Record, error) { return rec, nil })
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, id sandbox.ID) (*Record, error) {
	rec, err := r.get(ctx, r.c, id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, sandbox.ErrNotFound(id)
	}
	return rec, nil
}

// Delete implements Store.
func (r *Redis) Delete(ctx context.Context, id sandbox.ID) error {
	return r.update(ctx, id, nil, func(*redis.Tx, *Record) (*Record, error) { return nil, nil })
}

// List implements Store.
func (r *Redis) List(ctx context.Context) ([]*Record, error) {
	ids, err := r.c.SMembers(ctx, r.allKey()).Result()
	if err != nil {
		return nil, r.unavailable("list sandboxes", err)
	}
	out := make([]*Record, 0, len(ids))
	const batch = 256
	for len(ids) > 0 {
		n := min(batch, len(ids))
		keys := make([]string, n)
		for i, id := range ids[:n] {
			keys[i] = r.recKey(sandbox.ID(id))
		}
		vals, err := r.c.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, r.unavailable("list sandboxes", err)
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue // deleted since SMEMBERS
			}
			rec := &Record{}
			if err := json.Unmarshal([]byte(s), rec); err != nil {
				// One bad value must not keep every replica from starting.
				slog.Warn("skipping undecodable sandbox record in Redis", "key", keys[i], "err", err)
				continue
			}
			out = append(out, rec)
		}
		ids = ids[n:]
	}
	return out, nil
}

// Close implements Store.
func (r *Redis) Close() error { return r.c.Close() }

// PutWithin stores a new record only if it keeps the counts within the
// limits (0 = no limit): maxTotal records in all, maxPerOwner handed-out
// records of rec.Owner. The check and the write are one transaction, so
// replicas creating at the same time cannot together pass a limit. Over a
// limit it fails with ClassQuota; an existing ID is ClassConflict.
func (r *Redis) PutWithin(ctx context.Context, rec *Record, maxTotal, maxPerOwner int) error {
	watch := []string{r.allKey()}
	if rec.Owner != "" && rec.Pool == "" {
		watch = append(watch, r.ownerKey(rec.Owner))
	}
	return r.update(ctx, rec.ID, watch, func(tx *redis.Tx, old *Record) (*Record, error) {
		if old != nil {
			return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s already exists", rec.ID)
		}
		if maxTotal > 0 {
			n, err := tx.SCard(ctx, r.allKey()).Result()
			if err != nil {
				return nil, r.unavailable("count sandboxes", err)
			}
			if n >= int64(maxTotal) {
				return nil, sandbox.Errorf(sandbox.ClassQuota, "the servers run their maximum of %d sandboxes", maxTotal)
			}
		}
		if maxPerOwner > 0 && rec.Owner != "" && rec.Pool == "" {
			n, err := tx.SCard(ctx, r.ownerKey(rec.Owner)).Result()
			if err != nil {
				return nil, r.unavailable("count sandboxes", err)
			}
			if n >= int64(maxPerOwner) {
				return nil, sandbox.Errorf(sandbox.ClassQuota, "you have %d sandboxes, the maximum per user", n)
			}
		}
		return rec, nil
	})
}

// TakePooled hands one sandbox of node waiting in pool to owner: its record leaves
// the pool (Pool empty, FromPool set, Owner set) in one transaction, so
// two replicas taking at once never get the same sandbox. It returns nil
// when the pool is empty, and ClassQuota when owner already has
// maxPerOwner handed-out sandboxes (0 = no limit).
func (r *Redis) TakePooled(ctx context.Context, node, pool, owner string, maxPerOwner int) (*Record, error) {
	set := r.poolSetKey(node, pool)
	for attempt := 0; attempt < maxTxAttempts; attempt++ {
		id, err := r.c.SRandMember(ctx, set).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, r.unavailable("take from pool", err)
		}
		var taken *Record
		stale := false
		watch := []string{set}
		if owner != "" {
			watch = append(watch, r.ownerKey(owner))
		}
		err = r.update(ctx, sandbox.ID(id), watch, func(tx *redis.Tx, old *Record) (*Record, error) {
			if old == nil || old.Pool != pool || old.Node != node {
				stale = true
				return nil, errStale
			}
			if maxPerOwner > 0 && owner != "" {
				n, err := tx.SCard(ctx, r.ownerKey(owner)).Result()
				if err != nil {
					return nil, r.unavailable("count sandboxes", err)
				}
				if n >= int64(maxPerOwner) {
					return nil, sandbox.Errorf(sandbox.ClassQuota, "you have %d sandboxes, the maximum per user", n)
				}
			}
			taken = old.Clone()
			taken.Owner, taken.Pool, taken.FromPool = owner, "", true
			return taken, nil
		})
		switch {
		case err == nil:
			return taken.Clone(), nil
		case stale:
			// A member whose record left the pool (or vanished) without the
			// set knowing: drop it and pick again.
			if err := r.dropStale(ctx, node, pool, sandbox.ID(id)); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
	}
	return nil, sandbox.Errorf(sandbox.ClassUnavailable, "warm pool %s too contended; retry", pool)
}

// dropStale removes id from pool's set unless its record is (again) in
// that pool, checked and removed in one transaction.
func (r *Redis) dropStale(ctx context.Context, node, pool string, id sandbox.ID) error {
	err := r.c.Watch(ctx, func(tx *redis.Tx) error {
		rec, err := r.get(ctx, tx, id)
		if err != nil && sandbox.ClassOf(err) != sandbox.ClassInternal {
			return err
		}
		if rec != nil && rec.Pool == pool && rec.Node == node {
			return nil
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SRem(ctx, r.poolSetKey(node, pool), string(id))
			return nil
		})
		return err
	}, r.recKey(id))
	if err != nil && !errors.Is(err, redis.TxFailedErr) { // changed meanwhile: the caller picks again
		return r.unavailable("take from pool", err)
	}
	return nil
}

// PoolMembers returns the IDs of node's sandboxes waiting in pool.
func (r *Redis) PoolMembers(ctx context.Context, node, pool string) ([]sandbox.ID, error) {
	ids, err := r.c.SMembers(ctx, r.poolSetKey(node, pool)).Result()
	if err != nil {
		return nil, r.unavailable("list pool", err)
	}
	out := make([]sandbox.ID, len(ids))
	for i, id := range ids {
		out[i] = sandbox.ID(id)
	}
	return out, nil
}

// CountOwner returns how many handed-out sandboxes owner has.
func (r *Redis) CountOwner(ctx context.Context, owner string) (int, error) {
	n, err := r.c.SCard(ctx, r.ownerKey(owner)).Result()
	if err != nil {
		return 0, r.unavailable("count sandboxes", err)
	}
	return int(n), nil
}

// ClaimExpiry reports whether the caller won the right to expire sandbox
// id: its record exists, is not pooled, its end time is not after now, and
// nobody claimed it before. Of several replicas asking, exactly one gets
// true; the claim lasts until the record is deleted (or hold passes, so a
// claimer that died does not block the expiry for ever).
func (r *Redis) ClaimExpiry(ctx context.Context, id sandbox.ID, now time.Time, hold time.Duration) (bool, error) {
	key := r.recKey(id)
	for attempt := 0; attempt < maxTxAttempts; attempt++ {
		won := false
		err := r.c.Watch(ctx, func(tx *redis.Tx) error {
			rec, err := r.get(ctx, tx, id)
			if err != nil {
				return err
			}
			if rec == nil || rec.Pool != "" || rec.EndAt.IsZero() || rec.EndAt.After(now) {
				return nil
			}
			var set *redis.BoolCmd
			if _, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				set = p.SetNX(ctx, r.expiringKey(id), "1", hold)
				return nil
			}); err != nil {
				return err
			}
			won = set.Val()
			return nil
		}, key)
		if errors.Is(err, redis.TxFailedErr) {
			backoff(attempt)
			continue
		}
		if err != nil {
			return false, r.unavailable("claim expiry", err)
		}
		return won, nil
	}
	return false, sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s too contended; retry", id)
}

var errStale = errors.New("stale")

// getter is a client or a transaction.
type getter interface {
	Get(ctx context.Context, key string) *redis.StringCmd
}

// get returns the record, or nil when there is none.
func (r *Redis) get(ctx context.Context, c getter, id sandbox.ID) (*Record, error) {
	data, err := c.Get(ctx, r.recKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, r.unavailable("read sandbox "+string(id), err)
	}
	rec := &Record{}
	if err := json.Unmarshal(data, rec); err != nil {
		// Not the store being away: a value someone else wrote there.
		return nil, sandbox.Wrap(sandbox.ClassInternal, err, fmt.Sprintf("decode record %s", id))
	}
	return rec, nil
}

// update replaces record id by next(tx, old) (nil: delete it); next reads
// through tx only (a second connection per transaction could exhaust the
// pool under load). The record moves between the index sets in one optimistic transaction watching the
// record and the extra keys; it is recomputed when another client changed
// any of them meanwhile.
func (r *Redis) update(ctx context.Context, id sandbox.ID, watch []string, next func(tx *redis.Tx, old *Record) (*Record, error)) error {
	key := r.recKey(id)
	keys := append([]string{key}, watch...)
	for attempt := 0; attempt < maxTxAttempts; attempt++ {
		err := r.c.Watch(ctx, func(tx *redis.Tx) error {
			old, err := r.get(ctx, tx, id)
			if err != nil && sandbox.ClassOf(err) == sandbox.ClassInternal {
				// An undecodable value may be replaced or deleted: better
				// than a record nobody can ever remove.
				old, err = nil, nil
			}
			if err != nil {
				return err
			}
			rec, err := next(tx, old)
			if err != nil {
				return err
			}
			var data []byte
			if rec != nil {
				if data, err = json.Marshal(rec); err != nil {
					return fmt.Errorf("encode record %s: %w", id, err)
				}
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				if old != nil {
					if old.Owner != "" && old.Pool == "" {
						p.SRem(ctx, r.ownerKey(old.Owner), string(id))
					}
					if old.Pool != "" {
						p.SRem(ctx, r.poolSetKey(old.Node, old.Pool), string(id))
					}
				}
				if rec == nil {
					p.Del(ctx, key, r.expiringKey(id))
					p.SRem(ctx, r.allKey(), string(id))
					return nil
				}
				p.Set(ctx, key, data, 0)
				p.SAdd(ctx, r.allKey(), string(id))
				if rec.Owner != "" && rec.Pool == "" {
					p.SAdd(ctx, r.ownerKey(rec.Owner), string(id))
				}
				if rec.Pool != "" {
					p.SAdd(ctx, r.poolSetKey(rec.Node, rec.Pool), string(id))
				}
				return nil
			})
			return err
		}, keys...)
		if errors.Is(err, redis.TxFailedErr) {
			backoff(attempt)
			continue
		}
		if err != nil {
			if errors.Is(err, errStale) {
				return err
			}
			var se *sandbox.Error
			if errors.As(err, &se) {
				return err
			}
			return r.unavailable("write sandbox "+string(id), err)
		}
		return nil
	}
	return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s too contended; retry", id)
}

// backoff sleeps a little, more after each failed attempt, with jitter so
// competing replicas do not retry in lockstep.
func backoff(attempt int) {
	d := time.Duration(min(attempt+1, 20)) * 200 * time.Microsecond
	time.Sleep(d + rand.N(d))
}

// Ping checks the server answers (ClassUnavailable when not).
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return r.unavailable("ping", err)
	}
	return nil
}
