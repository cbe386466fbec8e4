package store

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Leases grants named leases: at most one holder of a name at a time, for a
// bounded time, so a holder that dies frees the name by itself. A holder is
// known by its token (AcquireLease makes a fresh random one per hold), and
// only the token that holds a lease can renew or release it: a holder whose
// lease ran out (and was taken by another meanwhile) changes nothing. A
// lease is not re-entrant: a token holding a name cannot take it again.
//
// Bolt and Memory serve one daemon; Redis serves every replica sharing it
// (its server's clock decides expiry).
type Leases interface {
	// TryLease takes name for token for ttl when nobody holds it, and
	// reports whether it did. An error means the store could not say.
	TryLease(ctx context.Context, name, token string, ttl time.Duration) (bool, error)
	// RenewLease extends token's lease of name to ttl from now; false when
	// token no longer holds it (it ran out, and may be another's now).
	RenewLease(ctx context.Context, name, token string, ttl time.Duration) (bool, error)
	// ReleaseLease ends token's lease of name; false (and nothing changed)
	// when token does not hold it.
	ReleaseLease(ctx context.Context, name, token string) (bool, error)
}

var (
	_ Leases = (*Memory)(nil)
	_ Leases = (*Bolt)(nil)
	_ Leases = (*Redis)(nil)
)

var (
	// ErrLeaseHeld means AcquireLease gave up waiting: another holder kept
	// the lease until the caller's context ended (the error wraps the
	// context's too).
	ErrLeaseHeld = errors.New("lease held by another holder")
	// ErrLeaseLost means a lease ran out before its holder renewed or
	// released it: the holder no longer has it (another may).
	ErrLeaseLost = errors.New("lease lost")
)

// Lease is a held lease (AcquireLease). It is renewed in the background,
// every third of its time to live, until Release, so work of any length
// may run under it while a holder that dies frees it within that time.
type Lease struct {
	leases Leases
	name   string
	token  string
	ttl    time.Duration

	mu       sync.Mutex
	released bool
	lost     chan struct{} // closed once the lease is known to be lost
	lostOnce sync.Once
	stop     chan struct{} // closed by Release: the renewals end
	renewed  chan struct{} // closed when the renewal loop is done
}

// Lease waits: the first retry after a refusal waits leaseBackoffMin, each
// next one twice as long up to leaseBackoffMax, each with up to as much
// again of jitter (so waiters on two replicas do not poll in step).
const (
	leaseBackoffMin = 5 * time.Millisecond
	leaseBackoffMax = 200 * time.Millisecond
)

// AcquireLease takes lease name from ls for ttl, waiting (with backoff)
// while another holds it, for as long as ctx lasts: give ctx a deadline to
// bound the wait. A refusal at the end wraps ErrLeaseHeld and ctx's
// error; a store failure ends the wait at once. The lease is renewed until
// Release.
func AcquireLease(ctx context.Context, ls Leases, name string, ttl time.Duration) (*Lease, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("lease %q: time to live must be positive", name)
	}
	token := newLeaseToken()
	wait := leaseBackoffMin
	for {
		ok, err := ls.TryLease(ctx, name, token, ttl)
		if err != nil {
			return nil, fmt.Errorf("take lease %q: %w", name, err)
		}
		if ok {
			break
		}
		t := time.NewTimer(wait + rand.N(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("take lease %q: %w: %w", name, ErrLeaseHeld, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, leaseBackoffMax)
	}
	l := &Lease{leases: ls, name: name, token: token, ttl: ttl,
		lost: make(chan struct{}), stop: make(chan struct{}), renewed: make(chan struct{})}
	go l.keepAlive() //nolint:gosec // G118: the renewal outlives the acquiring request by design; it stops on Release or when the lease is lost
	return l, nil
}

func newLeaseToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Name is the lease's name.
func (l *Lease) Name() string { return l.name }

// Token is the holder's token (what the store records as the holder).
func (l *Lease) Token() string { return l.token }

// Lost is closed once the lease is known to be lost (a renewal found it
// gone). Work that must not outlive the lease checks Renew before each
// step it cannot undo; Lost serves those that only watch.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// keepAlive renews the lease every third of its time to live, so two
// renewals may fail (the store slow or briefly away) before it runs out.
func (l *Lease) keepAlive() {
	defer close(l.renewed)
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.lost:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
		err := l.Renew(ctx)
		cancel()
		if err != nil && !errors.Is(err, ErrLeaseLost) {
			slog.Debug("renew a lease (retried at the next tick)", "lease", l.name, "err", err)
		}
	}
}

// Renew extends the lease to its time to live from now: ErrLeaseLost when
// it ran out meanwhile (it is not taken back: another may hold it). It is
// the fence before a step that must run under the lease.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return fmt.Errorf("renew lease %q: %w (released)", l.name, ErrLeaseLost)
	}
	select {
	case <-l.lost:
		return fmt.Errorf("renew lease %q: %w", l.name, ErrLeaseLost)
	default:
	}
	ok, err := l.leases.RenewLease(ctx, l.name, l.token, l.ttl)
	if err != nil {
		return fmt.Errorf("renew lease %q: %w", l.name, err)
	}
	if !ok {
		l.lostOnce.Do(func() { close(l.lost) })
		return fmt.Errorf("renew lease %q: %w", l.name, ErrLeaseLost)
	}
	return nil
}

// Release stops the renewals and frees the lease, if this holder still has
// it: ErrLeaseLost when it had run out (another holder's lease of the name
// is left alone). Releasing twice is a no-op.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.mu.Unlock()
	close(l.stop)
	<-l.renewed // no renewal after the release
	ok, err := l.leases.ReleaseLease(ctx, l.name, l.token)
	if err != nil {
		return fmt.Errorf("release lease %q (it runs out by itself): %w", l.name, err)
	}
	if !ok {
		l.lostOnce.Do(func() { close(l.lost) })
		return fmt.Errorf("release lease %q: %w", l.name, ErrLeaseLost)
	}
	return nil
}

// Memory: leases in a map of the store, expired by the process's clock.

type memLease struct {
	token string
	exp   time.Time
}

func (m *Memory) heldLocked(name, token string, now time.Time) bool {
	l, ok := m.leases[name]
	return ok && l.token == token && now.Before(l.exp)
}

// TryLease implements Leases.
func (m *Memory) TryLease(_ context.Context, name, token string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if l, ok := m.leases[name]; ok && now.Before(l.exp) {
		return false, nil
	}
	if m.leases == nil {
		m.leases = map[string]memLease{}
	}
	m.leases[name] = memLease{token: token, exp: now.Add(ttl)}
	return true, nil
}

// RenewLease implements Leases.
func (m *Memory) RenewLease(_ context.Context, name, token string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if !m.heldLocked(name, token, now) {
		return false, nil
	}
	m.leases[name] = memLease{token: token, exp: now.Add(ttl)}
	return true, nil
}

// ReleaseLease implements Leases.
func (m *Memory) ReleaseLease(_ context.Context, name, token string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.heldLocked(name, token, time.Now())
	if l, ok := m.leases[name]; ok && l.token == token {
		delete(m.leases, name) // expired or not, it was this holder's
	}
	return held, nil
}

// Bolt keeps leases in bucket "leases" (NAME -> boltLease); each call is
// one write transaction, so a daemon's goroutines see one holder. Only one
// process opens the file: there is nobody else to share them with.
var bucketLeases = []byte("leases")

type boltLease struct {
	Token string `json:"t"`
	Exp   int64  `json:"e"` // unix nanoseconds
}

// boltLeaseTx runs fn on the lease of name (nil: none, or a damaged value)
// in one write transaction; fn returns the lease to store (nil: delete).
func (b *Bolt) boltLeaseTx(name string, fn func(cur *boltLease, now time.Time) (*boltLease, bool)) (bool, error) {
	var out bool
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(bucketLeases)
		if err != nil {
			return err
		}
		k := []byte(name)
		var cur *boltLease
		if v := bk.Get(k); v != nil {
			cur = &boltLease{}
			if json.Unmarshal(v, cur) != nil {
				cur = nil // a damaged value: free, the write replaces it
			}
		}
		next, ok := fn(cur, time.Now())
		out = ok
		switch {
		case next == cur && cur != nil:
			return nil // unchanged: no write
		case next == nil && cur != nil:
			return bk.Delete(k)
		case next == nil:
			return nil
		}
		v, err := json.Marshal(next)
		if err != nil {
			return err
		}
		return bk.Put(k, v)
	})
	if err != nil {
		return false, fmt.Errorf("lease %q in the store: %w", name, err)
	}
	return out, nil
}

func (l *boltLease) live(now time.Time) bool { return l != nil && now.UnixNano() < l.Exp }

// TryLease implements Leases.
func (b *Bolt) TryLease(_ context.Context, name, token string, ttl time.Duration) (bool, error) {
	return b.boltLeaseTx(name, func(cur *boltLease, now time.Time) (*boltLease, bool) {
		if cur.live(now) {
			return cur, false
		}
		return &boltLease{Token: token, Exp: now.Add(ttl).UnixNano()}, true
	})
}

// RenewLease implements Leases.
func (b *Bolt) RenewLease(_ context.Context, name, token string, ttl time.Duration) (bool, error) {
	return b.boltLeaseTx(name, func(cur *boltLease, now time.Time) (*boltLease, bool) {
		if !cur.live(now) || cur.Token != token {
			return cur, false
		}
		return &boltLease{Token: token, Exp: now.Add(ttl).UnixNano()}, true
	})
}

// ReleaseLease implements Leases. A lease that ran out is deleted too
// when it is still this holder's (nobody took it since): nothing else
// would remove it.
func (b *Bolt) ReleaseLease(_ context.Context, name, token string) (bool, error) {
	return b.boltLeaseTx(name, func(cur *boltLease, now time.Time) (*boltLease, bool) {
		if cur == nil || cur.Token != token {
			return cur, false
		}
		return nil, cur.live(now)
	})
}

// Redis keeps a lease as PREFIX:lease:NAME holding its holder's token, with
// the lease's time to live (the server expires it). Taking it is one SET
// NX PX; renewing and releasing compare the token and change the key in
// one optimistic transaction (WATCH/MULTI, as every other write here): no
// Lua, so an ACL user without scripting commands works.
func (r *Redis) leaseKey(name string) string { return r.prefix + ":lease:" + name }

// TryLease implements Leases.
func (r *Redis) TryLease(ctx context.Context, name, token string, ttl time.Duration) (bool, error) {
	ok, err := r.c.SetNX(ctx, r.leaseKey(name), token, ttl).Result()
	if err != nil {
		return false, r.unavailable("take lease", err)
	}
	return ok, nil
}

// RenewLease implements Leases.
func (r *Redis) RenewLease(ctx context.Context, name, token string, ttl time.Duration) (bool, error) {
	return r.ifLeaseHolder(ctx, name, token, "renew lease", func(p redis.Pipeliner, key string) func() bool {
		cmd := p.PExpire(ctx, key, ttl)
		return cmd.Val
	})
}

// ReleaseLease implements Leases.
func (r *Redis) ReleaseLease(ctx context.Context, name, token string) (bool, error) {
	return r.ifLeaseHolder(ctx, name, token, "release lease", func(p redis.Pipeliner, key string) func() bool {
		cmd := p.Del(ctx, key)
		return func() bool { return cmd.Val() == 1 }
	})
}

// ifLeaseHolder runs change on the lease's key when token holds it, in one
// transaction that fails if the key changed (or expired) after the read;
// change returns what tells that its command found the key.
func (r *Redis) ifLeaseHolder(ctx context.Context, name, token, op string, change func(p redis.Pipeliner, key string) func() bool) (bool, error) {
	key := r.leaseKey(name)
	for attempt := 0; attempt < maxTxAttempts; attempt++ {
		held := false
		err := r.c.Watch(ctx, func(tx *redis.Tx) error {
			cur, err := tx.Get(ctx, key).Result()
			if errors.Is(err, redis.Nil) {
				return nil
			}
			if err != nil {
				return err
			}
			if cur != token {
				return nil
			}
			var found func() bool
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				found = change(p, key)
				return nil
			})
			held = err == nil && found()
			return err
		}, key)
		if errors.Is(err, redis.TxFailedErr) {
			backoff(attempt) // it changed under us: read again
			continue
		}
		if err != nil {
			return false, r.unavailable(op, err)
		}
		return held, nil
	}
	return false, sandbox.Errorf(sandbox.ClassUnavailable, "%s %q: too contended; retry", op, name)
}
