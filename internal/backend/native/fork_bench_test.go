package native

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// BenchmarkForkPhases profiles a fork step by step, as
// BenchmarkCreateDestroyPhases does a create: a running sandbox with a
// 1 GiB disk and 64 MiB written in its /workspace (flushed to its disk
// before the first fork, as the benchmark through the daemon has it) is
// forked b.N times, each fork destroyed after it runs; the medians of
// each phase are printed as a Markdown table (docs/benchmarks.md, "Volumes
// and fork").
//
//	go test -run '^$' -bench ForkPhases -benchtime 10x ./internal/backend/native/
func BenchmarkForkPhases(b *testing.B) {
	be := newTestBackend(b, testutil.ShortTempDir(b))
	ctx := context.Background()
	var (
		mu    sync.Mutex
		order []string
		wall  = map[string][]time.Duration{}
	)
	SetPhaseHook(func(s PhaseSample) {
		if s.Op != "create" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := wall[s.Phase]; !ok {
			order = append(order, s.Phase)
		}
		wall[s.Phase] = append(wall[s.Phase], s.Wall)
	})
	defer SetPhaseHook(nil)
	const disk = 1 << 30
	src := sandbox.NewID()
	spec := sandbox.Spec{ID: src, Template: sandbox.HostTemplate(), Resources: sandbox.Resources{DiskBytes: disk}}
	info, err := be.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Destroy(context.Background(), src)
	bx, err := be.lookup(src)
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(bx.diskPath("workspace", "state"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, 64<<20); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	_ = f.Chown(int(bx.rec.HostIDBase)+1000, int(bx.rec.HostIDBase)+1000)
	f.Close()
	mu.Lock()
	order, wall = nil, map[string][]time.Duration{}
	mu.Unlock()
	var totals []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := sandbox.NewID()
		fs := info.Spec
		fs.ID = id
		start := time.Now()
		if _, err := be.Fork(ctx, src, fs); err != nil {
			b.Fatal(err)
		}
		totals = append(totals, time.Since(start))
		b.StopTimer()
		if err := be.Destroy(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	med := func(d []time.Duration) string {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return fmt.Sprintf("%.1f", float64(s[len(s)/2].Microseconds())/1000)
	}
	var t strings.Builder
	t.WriteString("\n| fork phase | wall ms (median) |\n|---|---:|\n")
	for _, k := range order {
		fmt.Fprintf(&t, "| %s | %s |\n", k, med(wall[k]))
	}
	fmt.Fprintf(&t, "| total (n=%d) | %s |\n", len(totals), med(totals))
	fmt.Println(t.String())
}
