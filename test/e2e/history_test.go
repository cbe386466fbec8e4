package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/history"
)

type historyAnswer struct {
	Resolution float64         `json:"resolution_seconds"`
	Points     []history.Point `json:"points"`
}

func readHistory(t *testing.T, d *daemon, key, id, query string) historyAnswer {
	t.Helper()
	status, data := d.call(t, "GET", "/v1/sandboxes/"+id+"/metrics"+query, key, nil)
	if status != 200 {
		t.Fatalf("metrics history: %d %s", status, data)
	}
	var h historyAnswer
	if err := json.Unmarshal(data, &h); err != nil {
		t.Fatalf("metrics history: %v: %s", err, data)
	}
	return h
}

// TestMetricsHistory: a sandbox's history starts with its life, has a
// point every METRICS_HISTORY_RESOLUTION, stays within METRICS_HISTORY_
// POINTS by merging old points (still covering the whole life), stops
// while paused, answers time ranges on the native API and E2B's, is the
// owner's only and goes with the sandbox.
func TestMetricsHistory(t *testing.T) {
	const res = 0.25
	d := startDaemon(t, "API_KEYS=ka:alice,kb:bob", "POOL_SIZE=0", fmt.Sprint("METRICS_HISTORY_RESOLUTION=", res), "METRICS_HISTORY_POINTS=16")
	before := time.Now()
	sb := createRaw(t, d, "ka", map[string]any{})
	created := time.Now()
	// 60 MB held for 1.5 s: some sample sees it, and merging keeps it.
	status, data := d.call(t, "POST", "/v1/sandboxes/"+sb+"/exec", "ka", map[string]any{"cmd": []string{"python3", "-c", "import time; x = bytearray(60 << 20); time.sleep(1.5)"}})
	if status != 200 {
		t.Fatalf("exec: %d %s", status, data)
	}
	// Wait (bounded) until more samples were taken than are kept.
	var h historyAnswer
	for i := 0; ; i++ {
		h = readHistory(t, d, "ka", sb, "")
		var span float64
		for _, p := range h.Points {
			span += p.Span
		}
		if span > 24*res {
			break
		}
		if i == 200 {
			t.Fatalf("after %d reads the history covers %v s: %+v", i, span, h.Points)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if h.Resolution != res {
		t.Fatalf("resolution %v, want %v", h.Resolution, res)
	}
	pts := h.Points
	if len(pts) > 16 || len(pts) < 8 {
		t.Fatalf("%d points kept, want 8 to 16 (METRICS_HISTORY_POINTS=16)", len(pts))
	}
	first := pts[0].Time
	if first.Before(before.Add(-time.Second)) || first.After(created.Add(2*time.Second)) {
		t.Fatalf("first point at %v, the sandbox was created between %v and %v", first, before, created)
	}
	var peak int64
	for i, p := range pts {
		peak = max(peak, p.MemoryBytes)
		if p.CPUCount < 1 || p.MemoryBytes <= 0 || p.Pids < 1 {
			t.Fatalf("point %d empty: %+v", i, p)
		}
		if i == 0 {
			continue
		}
		prev := pts[i-1]
		if !p.Time.After(prev.Time) || p.CPUSeconds < prev.CPUSeconds {
			t.Fatalf("points %d and %d out of order: %+v %+v", i-1, i, prev, p)
		}
		// Each point covers the time to the next: the whole life, no gaps
		// larger than a tick's jitter.
		if gap := p.Time.Sub(prev.Time).Seconds(); gap < prev.Span*0.5 || gap > prev.Span+2 {
			t.Fatalf("point %d spans %v s but the next is %v s later", i-1, prev.Span, gap)
		}
	}
	if pts[0].Span <= res || pts[len(pts)-1].Span != res {
		t.Fatalf("oldest span %v, newest %v: want merged old points and new ones at the resolution", pts[0].Span, pts[len(pts)-1].Span)
	}
	if peak < 60<<20 {
		t.Fatalf("peak memory %d, the command held 60 MB", peak)
	}

	// Paused: the history stays and stops growing.
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+sb+"/pause", "ka", map[string]any{}); status != 200 {
		t.Fatalf("pause: %d %s", status, data)
	}
	time.Sleep(time.Duration(2 * res * float64(time.Second))) // a sample in flight lands
	paused := readHistory(t, d, "ka", sb, "").Points
	time.Sleep(time.Duration(4 * res * float64(time.Second)))
	if n := len(readHistory(t, d, "ka", sb, "").Points); n != len(paused) {
		t.Fatalf("a paused sandbox's history went from %d to %d points", len(paused), n)
	}

	// Ranges: native (unix seconds and RFC 3339) and E2B's getMetrics.
	mid := paused[len(paused)/2].Time
	last := paused[len(paused)-1].Time
	var want int
	for _, p := range paused {
		if !p.Time.Before(mid) && !p.Time.After(last) {
			want++
		}
	}
	q := fmt.Sprintf("?start=%s&end=%d.%09d", mid.Format(time.RFC3339Nano), last.Unix(), last.Nanosecond())
	if got := readHistory(t, d, "ka", sb, q).Points; len(got) != want || !got[0].Time.Equal(mid) {
		t.Fatalf("range %s: %d points, want %d from %v", q, len(got), want, mid)
	}
	if got := readHistory(t, d, "ka", sb, fmt.Sprintf("?start=%d", last.Unix()+10)).Points; len(got) != 0 {
		t.Fatalf("a range after the last point has %d points", len(got))
	}
	if status, _ := d.call(t, "GET", "/v1/sandboxes/"+sb+"/metrics?start=soon", "ka", nil); status != 400 {
		t.Fatalf("a bad start: %d, want 400", status)
	}
	from, to := mid.Unix(), last.Unix()
	want = 0
	for _, p := range paused {
		if s := p.Time.Unix(); s >= from && s <= to {
			want++
		}
	}
	status, data = d.call(t, "GET", fmt.Sprintf("/sandboxes/%s/metrics?start=%d&end=%d", sb, from, to), "", nil, "X-API-Key", "ka")
	var e2b []map[string]any
	if status != 200 || json.Unmarshal(data, &e2b) != nil || len(e2b) != want {
		t.Fatalf("E2B metrics %d..%d: %d %s, want %d points", from, to, status, data, want)
	}
	if e2b[0]["memUsed"].(float64) <= 0 || e2b[0]["cpuCount"].(float64) < 1 {
		t.Fatalf("E2B metric: %v", e2b[0])
	}

	// Bob cannot read it; deleted, it is gone.
	if status, _ := d.call(t, "GET", "/v1/sandboxes/"+sb+"/metrics", "kb", nil); status != 404 {
		t.Fatalf("another tenant's read: %d, want 404", status)
	}
	if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+sb, "ka", nil); status != 204 {
		t.Fatalf("delete: %d %s", status, data)
	}
	if status, _ := d.call(t, "GET", "/v1/sandboxes/"+sb+"/metrics", "ka", nil); status != 404 {
		t.Fatalf("a deleted sandbox's history: %d, want 404", status)
	}
}

// TestNetworkBytesInHistory: bytes a sandbox sends and receives over its
// network are counted (its veth's counters) in its stats and in its
// metrics history; a sandbox without networking counts none.
func TestNetworkBytesInHistory(t *testing.T) {
	d := startDaemon(t, "POOL_SIZE=0", "METRICS_HISTORY_RESOLUTION=0.25")
	sb := createRaw(t, d, "", map[string]any{"network": map[string]any{"mode": "egress"}})
	quiet := createRaw(t, d, "", map[string]any{"network": map[string]any{"mode": "none"}})
	// 200 datagrams of 1000 bytes to a documentation address: they leave
	// the sandbox (and are counted) whatever the egress policy does next;
	// a name lookup through the sandbox's resolver brings an answer back.
	const sent = 200 * 1000
	script := `import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(200):
    s.sendto(b"x" * 1000, ("192.0.2.1", 9))
try:
    socket.getaddrinfo("example.invalid", 80)
except OSError:
    pass
`
	for _, id := range []string{sb, quiet} {
		status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{"cmd": []string{"python3", "-c", script}})
		if status != 200 {
			t.Fatalf("exec: %d %s", status, data)
		}
	}
	var last history.Point
	for i := 0; ; i++ {
		h := readHistory(t, d, "", sb, "")
		if n := len(h.Points); n > 0 {
			last = h.Points[n-1]
		}
		if last.NetworkTxBytes >= sent && last.NetworkRxBytes > 0 {
			break
		}
		if i == 100 {
			t.Fatalf("history after 10 s: sent %d received %d bytes, want at least %d sent and some received", last.NetworkTxBytes, last.NetworkRxBytes, sent)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last.NetworkTxBytes > 4*sent {
		t.Errorf("sent %d bytes for %d written", last.NetworkTxBytes, sent)
	}
	status, data := d.call(t, "GET", "/v1/sandboxes/"+sb+"/stats", "", nil)
	if status != 200 {
		t.Fatalf("stats: %d %s", status, data)
	}
	st := mustJSON(t, data)
	if tx, _ := st["network_tx_bytes"].(float64); tx < float64(last.NetworkTxBytes) {
		t.Errorf("stats network_tx_bytes %v, below the history's %d", st["network_tx_bytes"], last.NetworkTxBytes)
	}
	status, data = d.call(t, "GET", "/v1/sandboxes/"+quiet+"/stats", "", nil)
	if status != 200 {
		t.Fatalf("stats: %d %s", status, data)
	}
	if st := mustJSON(t, data); st["network_tx_bytes"].(float64) != 0 || st["network_rx_bytes"].(float64) != 0 {
		t.Errorf("a sandbox without networking counts traffic: %v", st)
	}
}
