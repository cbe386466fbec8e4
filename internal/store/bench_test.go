package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// BenchmarkStore measures the writes a create, a pool hand-over and a
// delete make, on bbolt (the reference: one daemon's local file) and on
// Redis over loopback. go test -run '^$' -bench Store ./internal/store/
func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	rec := func(i int) *Record {
		return &Record{ID: sandbox.ID(fmt.Sprintf("sb%08d", i)), Owner: "alice", Template: "host", State: sandbox.StateRunning,
			CreatedAt: time.Now(), EndAt: time.Now().Add(time.Hour), AccessToken: "0123456789abcdef0123456789abcdef0123456789abcdef",
			Metadata: map[string]string{"k": "v"}}
	}
	bolt, err := OpenBolt(filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	defer bolt.Close()
	srv := testutil.StartRedis(b)
	rs, err := OpenRedis(ctx, RedisConfig{Addr: srv.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	for _, s := range []struct {
		name string
		st   Store
	}{{"bolt", bolt}, {"redis", rs}} {
		b.Run(s.name+"/put+get+delete", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := rec(i)
				if err := s.st.Put(ctx, r); err != nil {
					b.Fatal(err)
				}
				if _, err := s.st.Get(ctx, r.ID); err != nil {
					b.Fatal(err)
				}
				if err := s.st.Delete(ctx, r.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("redis/put-within-quota+delete", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r := rec(i)
			if err := rs.PutWithin(ctx, r, 1000, 100); err != nil {
				b.Fatal(err)
			}
			if err := rs.Delete(ctx, r.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("redis/pool-put+take+delete", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r := rec(i)
			r.Owner, r.Pool = "", "host"
			if err := rs.Put(ctx, r); err != nil {
				b.Fatal(err)
			}
			got, err := rs.TakePooled(ctx, "", "host", "alice", 100)
			if err != nil || got == nil {
				b.Fatal(got, err)
			}
			if err := rs.Delete(ctx, got.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}
