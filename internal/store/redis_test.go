package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

func openRedis(t *testing.T, srv *testutil.RedisServer) *Redis {
	t.Helper()
	s, err := OpenRedis(context.Background(), RedisConfig{Addr: srv.Addr(), KeyPrefix: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The Redis store passes the same contract test as bbolt and memory, and a
// second instance (another replica) sees what the first wrote.
func TestRedis(t *testing.T) {
	srv := testutil.StartRedis(t)
	a := openRedis(t, srv)
	testStore(t, a)
	b := openRedis(t, srv)
	if r, err := b.Get(context.Background(), "def"); err != nil || r.Owner != "bob" {
		t.Fatalf("second replica: %+v %v", r, err)
	}
	// Another prefix is another deployment: it sees nothing.
	other, err := OpenRedis(context.Background(), RedisConfig{Addr: srv.Addr(), KeyPrefix: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if all, err := other.List(context.Background()); err != nil || len(all) != 0 {
		t.Fatalf("other prefix lists %d records, %v", len(all), err)
	}
}

// 2 replicas × 16 concurrent takes from a pool of 20: every sandbox is
// handed out at most once, exactly 20 takes succeed, the rest find the pool
// empty, and the index sets agree with the records afterwards.
func TestRedisConcurrentPoolTakes(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	replicas := []*Redis{openRedis(t, srv), openRedis(t, srv)}
	const pooled = 20
	for i := 0; i < pooled; i++ {
		if err := replicas[0].Put(ctx, &Record{ID: sandbox.ID(fmt.Sprintf("p%02d", i)), Template: "host", Pool: "base"}); err != nil {
			t.Fatal(err)
		}
	}
	// A stale member (record gone) must be skipped, not handed out.
	if err := replicas[0].c.SAdd(ctx, replicas[0].poolSetKey("", "base"), "ghost").Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[sandbox.ID]string{}
	empty := 0
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for rep := range replicas {
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(s *Redis, owner string) {
				defer wg.Done()
				rec, err := s.TakePooled(ctx, "", "base", owner, 0)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if rec == nil {
					empty++
					return
				}
				if prev, dup := got[rec.ID]; dup {
					errs <- fmt.Errorf("sandbox %s handed to %s and %s", rec.ID, prev, owner)
				}
				got[rec.ID] = owner
				if rec.Owner != owner || rec.Pool != "" || !rec.FromPool {
					errs <- fmt.Errorf("taken record %+v", rec)
				}
			}(replicas[rep], fmt.Sprintf("u%d-%d", rep, i))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(got) != pooled || empty != 32-pooled {
		t.Fatalf("%d taken, %d found the pool empty; want %d and %d", len(got), empty, pooled, 32-pooled)
	}
	if ids, err := replicas[1].PoolMembers(ctx, "", "base"); err != nil || len(ids) != 0 {
		t.Fatalf("pool after the takes: %v %v", ids, err)
	}
	for id, owner := range got {
		r, err := replicas[1].Get(ctx, id)
		if err != nil || r.Owner != owner || r.Pool != "" {
			t.Fatalf("record %s: %+v %v (want owner %s)", id, r, err, owner)
		}
		if n, err := replicas[0].CountOwner(ctx, owner); err != nil || n != 1 {
			t.Fatalf("owner %s counts %d, %v", owner, n, err)
		}
	}
}

// A take over the owner's quota fails with a quota error and leaves the
// sandbox in the pool.
func TestRedisTakeWithinQuota(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	s := openRedis(t, srv)
	if err := s.Put(ctx, &Record{ID: "mine", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, &Record{ID: "p1", Pool: "base"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakePooled(ctx, "", "base", "alice", 1); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Fatalf("take over quota: %v", err)
	}
	if ids, _ := s.PoolMembers(ctx, "", "base"); len(ids) != 1 {
		t.Fatalf("pool after refused take: %v", ids)
	}
	if rec, err := s.TakePooled(ctx, "", "base", "bob", 1); err != nil || rec == nil || rec.ID != "p1" {
		t.Fatalf("take: %+v %v", rec, err)
	}
}

// 2 replicas × 16 concurrent creates of one owner with a per-owner limit of
// 5 and a global limit of 12 (counting other owners' sandboxes): the limits
// hold exactly, the refused ones get quota errors.
func TestRedisPutWithinQuota(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	replicas := []*Redis{openRedis(t, srv), openRedis(t, srv)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := map[string]int{}, 0
	errs := make(chan error, 64)
	for rep := range replicas {
		for i := 0; i < 16; i++ {
			for _, owner := range []string{"alice", "bob"} {
				wg.Add(1)
				go func(s *Redis, id, owner string) {
					defer wg.Done()
					err := s.PutWithin(ctx, &Record{ID: sandbox.ID(id), Owner: owner}, 12, 5)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						ok[owner]++
					case sandbox.ClassOf(err) == sandbox.ClassQuota:
						refused++
					default:
						errs <- err
					}
				}(replicas[rep], fmt.Sprintf("%s-%d-%d", owner, rep, i), owner)
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ok["alice"] != 5 || ok["bob"] != 5 || refused != 64-10 {
		t.Fatalf("created %v, refused %d", ok, refused)
	}
	all, err := replicas[0].List(ctx)
	if err != nil || len(all) != 10 {
		t.Fatalf("records: %d %v", len(all), err)
	}
	// The global limit counts pooled sandboxes too.
	for i := 0; i < 2; i++ {
		if err := replicas[1].PutWithin(ctx, &Record{ID: sandbox.ID(fmt.Sprintf("pool%d", i)), Pool: "base"}, 12, 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := replicas[1].PutWithin(ctx, &Record{ID: "carol-1", Owner: "carol"}, 12, 5); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Fatalf("create over the global limit: %v", err)
	}
	if err := replicas[1].PutWithin(ctx, &Record{ID: all[0].ID, Owner: "x"}, 0, 0); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("create over an existing id: %v", err)
	}
}

// Of 2 replicas × 16 goroutines racing to expire one sandbox, exactly one
// wins; a sandbox not yet at its end time, or extended meanwhile, is not
// claimed.
func TestRedisExpiryClaimedOnce(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	replicas := []*Redis{openRedis(t, srv), openRedis(t, srv)}
	now := time.Now().UTC()
	if err := replicas[0].Put(ctx, &Record{ID: "old", Owner: "alice", EndAt: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := replicas[0].Put(ctx, &Record{ID: "young", Owner: "alice", EndAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := map[sandbox.ID]int{}
	errs := make(chan error, 64)
	for rep := range replicas {
		for i := 0; i < 16; i++ {
			for _, id := range []sandbox.ID{"old", "young"} {
				wg.Add(1)
				go func(s *Redis, id sandbox.ID) {
					defer wg.Done()
					won, err := s.ClaimExpiry(ctx, id, now, time.Minute)
					if err != nil {
						errs <- err
						return
					}
					if won {
						mu.Lock()
						wins[id]++
						mu.Unlock()
					}
				}(replicas[rep], id)
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if wins["old"] != 1 || wins["young"] != 0 {
		t.Fatalf("wins = %v, want old once and young never", wins)
	}
	// Deleting the record ends the claim: a new sandbox of the same ID (not
	// in practice, but the key must not linger) could be claimed again.
	if err := replicas[1].Delete(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if n, err := replicas[1].c.Exists(ctx, replicas[1].expiringKey("old")).Result(); err != nil || n != 0 {
		t.Fatalf("claim left behind: %d %v", n, err)
	}
}

// With Redis down every call fails fast with a ClassUnavailable error, and
// works again once Redis is back (its data kept).
func TestRedisDownAndBack(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	s := openRedis(t, srv)
	if err := s.Put(ctx, &Record{ID: "keep", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	checks := map[string]error{}
	_, checks["get"] = s.Get(ctx, "keep")
	checks["put"] = s.Put(ctx, &Record{ID: "new"})
	_, checks["list"] = s.List(ctx)
	checks["delete"] = s.Delete(ctx, "keep")
	_, checks["take"] = s.TakePooled(ctx, "", "base", "alice", 0)
	_, checks["claim"] = s.ClaimExpiry(ctx, "keep", time.Now(), time.Minute)
	_, checks["nodes"] = s.Nodes(ctx)
	for op, err := range checks {
		if sandbox.ClassOf(err) != sandbox.ClassUnavailable {
			t.Errorf("%s with Redis down: %v (class %s)", op, err, sandbox.ClassOf(err))
		}
	}
	if _, err := OpenRedis(ctx, RedisConfig{Addr: srv.Addr()}); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("open with Redis down: %v", err)
	}
	srv.Start()
	// The client redials in the background (about once a second): poll,
	// bounded.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := s.Get(ctx, "keep")
		if err == nil {
			if r.Owner != "alice" {
				t.Fatalf("after Redis came back: %+v", r)
			}
			break
		}
		if sandbox.ClassOf(err) != sandbox.ClassUnavailable || time.Now().After(deadline) {
			t.Fatalf("after Redis came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.Put(ctx, &Record{ID: "new"}); err != nil {
		t.Fatal(err)
	}
}

// Nodes announce themselves with a TTL and drop out when it passes.
func TestRedisNodes(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	a, b := openRedis(t, srv), openRedis(t, srv)
	if err := a.PutNode(ctx, Node{ID: "a", Address: "http://a", Backends: []string{"native"}, Sandboxes: 3}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.PutNode(ctx, Node{ID: "b", Address: "http://b", Backends: []string{"native"}}, time.Second); err != nil {
		t.Fatal(err)
	}
	nodes, err := b.Nodes(ctx)
	if err != nil || len(nodes) != 2 || nodes[0].ID != "a" || nodes[0].Sandboxes != 3 || nodes[1].Address != "http://b" {
		t.Fatalf("nodes: %+v %v", nodes, err)
	}
	// b's lease passes (Redis expires keys on its own clock; poll, bounded).
	deadline := time.Now().Add(10 * time.Second)
	for {
		nodes, err = a.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired node still listed: %+v", nodes)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if nodes[0].ID != "a" {
		t.Fatalf("nodes: %+v", nodes)
	}
	if err := a.DeleteNode(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := a.Nodes(ctx); len(nodes) != 0 {
		t.Fatalf("deleted node listed: %+v", nodes)
	}
}

// REDIS_USER and REDIS_PASSWORD reach the server: an ACL user with a
// password gets in, a wrong password is a clear unavailable error.
func TestRedisAuth(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	admin := openRedis(t, srv)
	if err := admin.c.Do(ctx, "ACL", "SETUSER", "agentbox", "on", ">s3cret", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.c.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	s, err := OpenRedis(ctx, RedisConfig{Addr: srv.Addr(), Username: "agentbox", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(ctx, &Record{ID: "x", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, err = OpenRedis(ctx, RedisConfig{Addr: srv.Addr(), Username: "agentbox", Password: "not-the-pw-123"})
	if sandbox.ClassOf(err) != sandbox.ClassUnavailable || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v", err)
	}
	if strings.Contains(err.Error(), "not-the-pw-123") {
		t.Fatalf("error shows the password: %v", err)
	}
	// The test server's shutdown logs in as the default user.
	if err := s.c.Do(ctx, "ACL", "SETUSER", "default", "on").Err(); err != nil {
		t.Fatal(err)
	}
}

// A value that is not a record is an internal error, not "unavailable",
// and can still be replaced or deleted.
func TestRedisCorruptRecord(t *testing.T) {
	srv := testutil.StartRedis(t)
	ctx := context.Background()
	s := openRedis(t, srv)
	if err := s.c.Set(ctx, s.recKey("bad"), "{not json", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "bad"); sandbox.ClassOf(err) != sandbox.ClassInternal {
		t.Fatalf("get: %v", err)
	}
	// List skips it (one bad value must not stop a replica's recovery).
	if err := s.Put(ctx, &Record{ID: "good"}); err != nil {
		t.Fatal(err)
	}
	if err := s.c.SAdd(ctx, s.allKey(), "bad").Err(); err != nil {
		t.Fatal(err)
	}
	if all, err := s.List(ctx); err != nil || len(all) != 1 || all[0].ID != "good" {
		t.Fatalf("list: %+v %v", all, err)
	}
	// It can still be replaced and deleted.
	if err := s.Put(ctx, &Record{ID: "bad", Owner: "alice"}); err != nil {
		t.Fatalf("put over it: %v", err)
	}
	if r, err := s.Get(ctx, "bad"); err != nil || r.Owner != "alice" {
		t.Fatalf("get after put: %+v %v", r, err)
	}
	if err := s.c.Set(ctx, s.recKey("bad2"), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "bad2"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := s.Get(ctx, "bad2"); !sandbox.IsNotFound(err) {
		t.Fatalf("after delete: %v", err)
	}
}
