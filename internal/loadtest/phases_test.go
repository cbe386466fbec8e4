package loadtest

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestTakePhases reads a histogram named like the daemon's through a real
// Prometheus handler (both exposition formats are on offer; TakePhases
// must get and parse the text one), including a step name that needs
// escaping, and PhaseTable shows each step's mean per segment and its change.
func TestTakePhases(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: phaseMetric, Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"op", "phase"})
	reg.MustRegister(h)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	empty, err := TakePhases(context.Background(), srv.URL, "")
	if err != nil || len(empty) != 0 {
		t.Fatalf("no samples yet: got %v, %v", empty, err)
	}
	odd := `container.Run: "quoted", back\slash`
	h.WithLabelValues("create", odd).Observe(0.010)
	h.WithLabelValues("create", odd).Observe(0.020)
	h.WithLabelValues("destroy", "unmount").Observe(0.002)
	first, err := TakePhases(context.Background(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	got := first["create: "+odd]
	if got.Count != 2 || got.Mean() != 15*time.Millisecond {
		t.Fatalf("create step: got %+v (mean %s), want 2 runs of 15ms mean; all: %v", got, got.Mean(), first)
	}
	if d := first["destroy: unmount"]; d.Count != 1 || d.Mean() != 2*time.Millisecond {
		t.Fatalf("destroy step: got %+v", d)
	}
	second := PhaseTotals{"create: " + odd: {Count: 1, Sum: 30 * time.Millisecond}, "destroy: unmount": {Count: 4, Sum: 40 * time.Microsecond}}
	table := PhaseTable([]PhaseTotals{first, second})
	if !strings.Contains(table, "| create: "+odd+" | 3 | 15.00 | 30.00 | +100% |") {
		t.Errorf("table lacks the create step's row:\n%s", table)
	}
	// 2.04 ms over 5 runs: above the 0.1 ms floor, so shown.
	if !strings.Contains(table, "| destroy: unmount | 5 | 2.00 | 0.01 | -100% |") {
		t.Errorf("table lacks the destroy step's row:\n%s", table)
	}
}

// TestTakeCreates reads the manager's create histogram by source, and
// PoolShare is the pool hits' share of all creates.
func TestTakeCreates(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: createMetric}, []string{"source"})
	reg.MustRegister(h)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	for range 3 {
		h.WithLabelValues("pool").Observe(0.004)
	}
	h.WithLabelValues("cold").Observe(0.120)
	got, err := TakeCreates(context.Background(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if got["pool"].Count != 3 || got["cold"].Count != 1 || got["cold"].Mean() != 120*time.Millisecond {
		t.Fatalf("creates: %+v", got)
	}
	if share := PoolShare(got); share != 0.75 {
		t.Errorf("pool share %v, want 0.75", share)
	}
	if share := PoolShare(PhaseTotals{}); share != 0 {
		t.Errorf("pool share of no creates %v, want 0", share)
	}
}

// TestMetricsUnlabelled: the leak checks' figures (go_goroutines,
// process_open_fds) come from a real registry's exposition, labelled
// series left out.
func TestMetricsUnlabelled(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "labelled_total"}, []string{"k"})
	c.WithLabelValues("v").Add(3)
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	m, err := metrics(context.Background(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if m["go_goroutines"] < 1 || m["process_open_fds"] < 1 {
		t.Errorf("go_goroutines %v, process_open_fds %v: want both", m["go_goroutines"], m["process_open_fds"])
	}
	if _, ok := m["labelled_total"]; ok {
		t.Error("a labelled series was read as a figure")
	}
}
