package store

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// testLeases is the Leases contract, the same for every store: a and b are
// two views of one store (two replicas' clients on Redis, the same
// instance otherwise).
func testLeases(t *testing.T, a, b Leases) {
	ctx := context.Background()
	try := func(ls Leases, name, token string, ttl time.Duration) bool {
		t.Helper()
		ok, err := ls.TryLease(ctx, name, token, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	renew := func(ls Leases, name, token string) bool {
		t.Helper()
		ok, err := ls.RenewLease(ctx, name, token, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	release := func(ls Leases, name, token string) bool {
		t.Helper()
		ok, err := ls.ReleaseLease(ctx, name, token)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// One holder per name; names are independent; not re-entrant.
	if !try(a, "s\x00alice\x00k", "t1", time.Minute) {
		t.Fatal("a free lease was refused")
	}
	if try(b, "s\x00alice\x00k", "t2", time.Minute) || try(a, "s\x00alice\x00k", "t1", time.Minute) {
		t.Fatal("a held lease was granted again")
	}
	if !try(b, "s\x00bob\x00k", "t2", time.Minute) {
		t.Fatal("another name was refused")
	}
	// Only the holder renews and releases.
	if !renew(b, "s\x00alice\x00k", "t1") || renew(a, "s\x00alice\x00k", "t2") || renew(a, "nobody's", "t1") {
		t.Fatal("renew: the holder refused, or another token accepted")
	}
	if release(a, "s\x00alice\x00k", "t2") || release(b, "nobody's", "t1") {
		t.Fatal("released by a token that does not hold it")
	}
	if try(b, "s\x00alice\x00k", "t3", time.Minute) {
		t.Fatal("a lease was free after another token's release")
	}
	if !release(b, "s\x00alice\x00k", "t1") || release(a, "s\x00alice\x00k", "t1") {
		t.Fatal("release by the holder: refused, or twice")
	}
	if !try(b, "s\x00alice\x00k", "t3", time.Minute) || !release(a, "s\x00alice\x00k", "t3") {
		t.Fatal("a released lease was not free")
	}

	// Fencing: a holder whose lease ran out renews nothing and releases
	// nothing, though another holds the name now.
	if !try(a, "short", "old", 100*time.Millisecond) {
		t.Fatal("take short")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !try(b, "short", "new", time.Minute) {
		if time.Now().After(deadline) {
			t.Fatal("a lease of 100 ms still held after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if renew(a, "short", "old") || release(a, "short", "old") {
		t.Fatal("the expired holder renewed or released the new holder's lease")
	}
	if try(a, "short", "third", time.Minute) {
		t.Fatal("the new holder's lease was lost to the old holder's release")
	}
	// An expired lease nobody took is not the holder's any more either.
	if !try(a, "lapsed", "x", 50*time.Millisecond) {
		t.Fatal("take lapsed")
	}
	time.Sleep(150 * time.Millisecond)
	if renew(a, "lapsed", "x") {
		t.Fatal("renewed a lease that had run out")
	}
	if !try(b, "lapsed", "y", time.Minute) {
		t.Fatal("a lease that ran out was not free")
	}

	// 2 × 16 concurrent takes of one name: exactly one wins.
	var won atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for _, ls := range []Leases{a, b} {
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := ls.TryLease(ctx, "race", "r"+string(rune('a'+i)), time.Minute)
				if err != nil {
					errs <- err
				}
				if ok {
					won.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if won.Load() != 1 {
		t.Fatalf("%d of 32 concurrent takes won, want 1", won.Load())
	}

	testAcquireLease(t, a, b)
}

// testAcquireLease checks the held-lease helper over a store: waits bounded
// by the context, hand-over on release, renewals that keep a lease past its
// time to live, mutual exclusion of 2 × 8 holders, and a lost lease seen
// as lost without touching the next holder's.
func testAcquireLease(t *testing.T, a, b Leases) {
	ctx := context.Background()
	l1, err := AcquireLease(ctx, a, "acq", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Another waiter gives up when its context ends.
	wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	start := time.Now()
	_, err = AcquireLease(wctx, b, "acq", time.Minute)
	cancel()
	if !errors.Is(err, ErrLeaseHeld) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting on a held lease: %v, want ErrLeaseHeld and the deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the wait took %s past a 150 ms deadline", d)
	}
	// A waiter gets it once the holder releases.
	got := make(chan *Lease, 1)
	go func() {
		l, err := AcquireLease(ctx, b, "acq", time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(50 * time.Millisecond)
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("a second release: %v", err)
	}
	var l2 *Lease
	select {
	case l2 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get a released lease")
	}
	if l2 == nil || l2.Token() == l1.Token() {
		t.Fatal("no fresh holder")
	}
	if err := l1.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew after release: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Renewals keep a lease for three times its time to live and more
	// (not shorter: on a loaded machine a renewal may take a while).
	l3, err := AcquireLease(ctx, a, "kept", 900*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2700 * time.Millisecond)
	if ok, err := b.TryLease(ctx, "kept", "intruder", time.Minute); err != nil || ok {
		t.Fatalf("a renewed lease was taken: %v %v", ok, err)
	}
	if err := l3.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Lost: the lease goes to another holder behind the first one's back
	// (as when its time ran out while it was stopped); the first sees it
	// lost, and its release leaves the new holder's lease alone.
	l4, err := AcquireLease(ctx, a, "stolen", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.ReleaseLease(ctx, "stolen", l4.Token()); err != nil || !ok {
		t.Fatalf("drop l4's lease: %v %v", ok, err)
	}
	if ok, err := b.TryLease(ctx, "stolen", "thief", time.Minute); err != nil || !ok {
		t.Fatalf("take the dropped lease: %v %v", ok, err)
	}
	select {
	case <-l4.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the renewals did not find the lease lost")
	}
	if err := l4.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew a lost lease: %v", err)
	}
	if err := l4.Release(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("release a lost lease: %v", err)
	}
	if ok, err := a.RenewLease(ctx, "stolen", "thief", time.Minute); err != nil || !ok {
		t.Fatalf("the thief's lease after the loser's release: %v %v", ok, err)
	}

	// 2 × 8 holders of one name, each in turn: never two at once.
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for _, ls := range []Leases{a, b} {
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				l, err := AcquireLease(wctx, ls, "mutex", 10*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(5 * time.Millisecond)
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d holders of one lease at once", most.Load())
	}
}

func TestMemoryLeases(t *testing.T) {
	m := NewMemory()
	testLeases(t, m, m)
}

func TestBoltLeases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	testLeases(t, s, s)
	// A lease held when the daemon stopped (it died holding it) is free
	// once the store is opened again: no other process could hold it.
	ctx := context.Background()
	if ok, err := s.TryLease(ctx, "held at exit", "dead", time.Hour); err != nil || !ok {
		t.Fatalf("take: %v %v", ok, err)
	}
	s.Close()
	s, err = OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ok, err := s.TryLease(ctx, "held at exit", "alive", time.Minute); err != nil || !ok {
		t.Fatalf("a lease of the previous process after a reopen: %v %v", ok, err)
	}
}

func TestRedisLeases(t *testing.T) {
	srv := testutil.StartRedis(t)
	a, b := openRedis(t, srv), openRedis(t, srv)
	testLeases(t, a, b)
	// Redis away: the store says so (503), and a waiter stops at once
	// rather than taking a failure for a held lease.
	ctx := context.Background()
	srv.Stop()
	defer srv.Start()
	if _, err := a.TryLease(ctx, "down", "t", time.Minute); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Fatalf("take with Redis away: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	_, err := AcquireLease(wctx, a, "down", time.Minute)
	if sandbox.ClassOf(err) != sandbox.ClassUnavailable || errors.Is(err, ErrLeaseHeld) || time.Since(start) > 30*time.Second {
		t.Fatalf("acquire with Redis away: %v after %s", err, time.Since(start))
	}
	if !strings.Contains(err.Error(), `"down"`) {
		t.Fatalf("the error does not name the lease: %v", err)
	}
}
