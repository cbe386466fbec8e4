package loadtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// phaseMetric is the daemon's histogram of the native backend's steps
// (internal/daemon: newBackendPhases).
const phaseMetric = "agentbox_backend_phase_seconds"

// PhaseTotals are timings as a daemon counted them since it started: the
// native backend's steps keyed "op: phase" (e.g. "create: network
// setup", TakePhases), or creates keyed by source (TakeCreates).
type PhaseTotals map[string]PhaseTotal

// PhaseTotal is how many times a step ran and their wall time together.
type PhaseTotal struct {
	Count uint64
	Sum   time.Duration
}

// Mean is the step's average wall time (0 when it never ran).
func (p PhaseTotal) Mean() time.Duration {
	if p.Count == 0 {
		return 0
	}
	return p.Sum / time.Duration(p.Count)
}

// TakePhases reads the daemon's step totals from its /metrics (key: the
// METRICS_TOKEN, "" for none). A daemon without the native backend has
// none: an empty map, not an error.
func TakePhases(ctx context.Context, url, key string) (PhaseTotals, error) {
	fams, err := readMetrics(ctx, url, key)
	if err != nil {
		return nil, err
	}
	return histogramTotals(fams[phaseMetric], func(l map[string]string) string {
		if l["op"] == "" {
			return ""
		}
		return l["op"] + ": " + l["phase"]
	}), nil
}

// createMetric is the manager's histogram of create latency as callers
// see it, by source: pool (a warm sandbox handed over), cold, remote.
const createMetric = "agentbox_sandbox_create_seconds"

// TakeCreates reads the daemon's create totals by source ("pool",
// "cold", "remote") from its /metrics. Under load, a create's latency
// has two modes, a pool hit's few milliseconds and a cold start's
// hundred: its median follows the share of pool hits as much as either
// mode, so a report of the median needs this beside it.
func TakeCreates(ctx context.Context, url, key string) (PhaseTotals, error) {
	fams, err := readMetrics(ctx, url, key)
	if err != nil {
		return nil, err
	}
	return histogramTotals(fams[createMetric], func(l map[string]string) string { return l["source"] }), nil
}

// PoolShare is the share of creates that were pool hits (0 without any).
func PoolShare(creates PhaseTotals) float64 {
	var all uint64
	for _, c := range creates {
		all += c.Count
	}
	if all == 0 {
		return 0
	}
	return float64(creates["pool"].Count) / float64(all)
}

// histogramTotals sums a histogram family's series by the key name gives
// their labels ("" skips a series).
func histogramTotals(fam *dto.MetricFamily, name func(labels map[string]string) string) PhaseTotals {
	out := PhaseTotals{}
	if fam == nil {
		return out
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		h := m.GetHistogram()
		k := name(labels)
		if h == nil || k == "" {
			continue
		}
		t := out[k]
		out[k] = PhaseTotal{Count: t.Count + h.GetSampleCount(), Sum: t.Sum + time.Duration(h.GetSampleSum()*float64(time.Second))}
	}
	return out
}

// readMetrics reads and parses the daemon's /metrics (text format).
func readMetrics(ctx context.Context, url, key string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	// Text, not the protobuf format client_golang would otherwise pick.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("daemon metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("daemon metrics: %d %s", resp.StatusCode, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("daemon metrics: %w", err)
	}
	return fams, nil
}

// Add returns p and q together (e.g. a whole run's totals from its
// segments').
func (p PhaseTotals) Add(q PhaseTotals) PhaseTotals {
	out := PhaseTotals{}
	for k, v := range p {
		out[k] = v
	}
	for k, v := range q {
		t := out[k]
		out[k] = PhaseTotal{Count: t.Count + v.Count, Sum: t.Sum + v.Sum}
	}
	return out
}

// Names are the steps, sorted.
func (p PhaseTotals) Names() []string {
	names := make([]string, 0, len(p))
	for k := range p {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// PhaseTable is a Markdown table of the steps' mean wall time per
// segment (one PhaseTotals per segment), with the change from the first
// segment to the last: which step a slowdown over a run comes from.
// Steps that never took a tenth of a millisecond on average are left out.
func PhaseTable(segments []PhaseTotals) string {
	if len(segments) == 0 {
		return ""
	}
	all := PhaseTotals{}
	for _, s := range segments {
		all = all.Add(s)
	}
	var b strings.Builder
	b.WriteString("| step | runs |")
	for i := range segments {
		fmt.Fprintf(&b, " %d |", i)
	}
	b.WriteString(" change |\n|---|---:|")
	for range segments {
		b.WriteString("---:|")
	}
	b.WriteString("---:|\n")
	for _, name := range all.Names() {
		if all[name].Mean() < 100*time.Microsecond {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d |", name, all[name].Count)
		for _, s := range segments {
			fmt.Fprintf(&b, " %.2f |", float64(s[name].Mean())/1e6)
		}
		first, last := segments[0][name].Mean(), segments[len(segments)-1][name].Mean()
		if first == 0 {
			b.WriteString(" — |\n")
			continue
		}
		fmt.Fprintf(&b, " %+.0f%% |\n", 100*float64(last-first)/float64(first))
	}
	return b.String()
}
