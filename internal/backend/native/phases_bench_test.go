package native

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// BenchmarkCreateDestroyPhases profiles a native create and destroy step
// by step (wall, daemon CPU, CPU of reaped children and of the sandbox's
// init) and logs a Markdown table of the medians: the "Fast path" profile
// of docs/benchmarks.md. Run it alone (-benchtime=30x): the CPU figures
// are process-wide.
func BenchmarkCreateDestroyPhases(b *testing.B) {
	be := newTestBackend(b, testutil.ShortTempDir(b))
	ctx := context.Background()
	type key struct{ op, phase string }
	var (
		mu    sync.Mutex
		order []key
		wall  = map[key][]time.Duration{}
		cpu   = map[key][]time.Duration{}
		kids  = map[key][]time.Duration{}
	)
	record := true
	SetPhaseHook(func(s PhaseSample) {
		mu.Lock()
		defer mu.Unlock()
		if !record {
			return
		}
		k := key{s.Op, s.Phase}
		if _, ok := wall[k]; !ok {
			order = append(order, k)
		}
		wall[k] = append(wall[k], s.Wall)
		cpu[k] = append(cpu[k], s.CPU)
		kids[k] = append(kids[k], s.ChildCPU)
	})
	defer SetPhaseHook(nil)
	var totals []time.Duration
	cycle := func() {
		id := sandbox.NewID()
		start := time.Now()
		if _, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()}); err != nil {
			b.Fatal(err)
		}
		if err := be.Destroy(ctx, id); err != nil {
			b.Fatal(err)
		}
		totals = append(totals, time.Since(start))
	}
	mu.Lock()
	record = false
	mu.Unlock()
	for i := 0; i < 3; i++ {
		cycle()
	}
	totals = nil
	mu.Lock()
	record = true
	mu.Unlock()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cycle()
	}
	b.StopTimer()
	med := func(d []time.Duration) string {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return fmt.Sprintf("%.2f", float64(s[len(s)/2].Microseconds())/1000)
	}
	var t strings.Builder
	t.WriteString("\n| op | phase | wall ms | daemon CPU ms | children CPU ms |\n|---|---|---:|---:|---:|\n")
	for _, k := range order {
		fmt.Fprintf(&t, "| %s | %s | %s | %s | %s |\n", k.op, k.phase, med(wall[k]), med(cpu[k]), med(kids[k]))
	}
	fmt.Fprintf(&t, "| create+destroy | total (n=%d) | %s | | |\n", len(totals), med(totals))
	fmt.Println(t.String()) // b.Log truncates benchmark output
}
