package loadtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// phaseMetric is the daemon's histogram of the native backend's steps
// (internal/daemon: newBackendPhases).
const phaseMetric = "agentbox_backend_phase_seconds"

// PhaseTotals are the native backend's steps as a daemon counted them
// since it started, keyed "op: phase" (e.g. "create: network setup").
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
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("daemon metrics: %w", err)
	}
	out := PhaseTotals{}
	fam := families[phaseMetric]
	if fam == nil {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		var op, phase string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "op":
				op = l.GetValue()
			case "phase":
				phase = l.GetValue()
			}
		}
		h := m.GetHistogram()
		if h == nil || op == "" {
			continue
		}
		out[op+": "+phase] = PhaseTotal{Count: h.GetSampleCount(), Sum: time.Duration(h.GetSampleSum() * float64(time.Second))}
	}
	return out, nil
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
