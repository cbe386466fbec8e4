package e2e

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestBenchQuickJSON runs `agentbox bench --quick --json` and checks the
// shape of what it prints (not its timings): one JSON array, every
// scenario for target agentbox, the fork/exec baseline next to them, and
// positive numbers throughout.
func TestBenchQuickJSON(t *testing.T) {
	testutil.RequireRoot(t)
	bin, agent := binaries(t)
	cmd := execCommand(bin, "bench", "--quick", "--json", "--docker", "off", "-n", "5", "--throughput-duration", "1s")
	cmd.Env = append(cmd.Env, "AGENT_PATH="+agent, "TMPDIR="+testutil.ShortTempDir(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("agentbox bench: %v\n%s", err, lastLines(stderr.String(), 20))
	}
	var rows []map[string]any
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("stdout is not one JSON array: %v\n%s", err, stdout.String())
	}
	if dec.More() {
		t.Fatalf("more than one JSON value on stdout: %s", stdout.String())
	}
	seen := map[string]bool{}
	for _, r := range rows {
		scenario, _ := r["scenario"].(string)
		target, _ := r["target"].(string)
		switch target {
		case bench.TargetAgentbox, bench.TargetBaseline, bench.TargetDocker:
		default:
			t.Errorf("row %v: target %q", r, target)
		}
		seen[scenario+"/"+target] = true
		for _, k := range []string{"n", "p50_ms", "p99_ms"} {
			if v, ok := r[k].(float64); !ok || v <= 0 {
				t.Errorf("row %s/%s: %s = %v, want a positive number", scenario, target, k, r[k])
			}
		}
		if p50, p99 := r["p50_ms"].(float64), r["p99_ms"].(float64); p99 < p50 {
			t.Errorf("row %s/%s: p99 %v < p50 %v", scenario, target, p99, p50)
		}
		ops, hasOps := r["ops_per_s"]
		if scenario == bench.ScenarioCycleThroughput || scenario == bench.ScenarioCycleRecycled {
			if v, ok := ops.(float64); !ok || v <= 0 {
				t.Errorf("row %s/%s: ops_per_s = %v, want a positive number", scenario, target, ops)
			}
		} else if hasOps {
			t.Errorf("row %s/%s has ops_per_s but is no throughput scenario", scenario, target)
		}
		for k := range r {
			switch k {
			case "scenario", "target", "n", "p50_ms", "p99_ms", "ops_per_s":
			default:
				t.Errorf("row %s/%s: unexpected field %q", scenario, target, k)
			}
		}
	}
	for _, s := range bench.Scenarios {
		if !seen[s+"/"+bench.TargetAgentbox] {
			t.Errorf("scenario %s: no agentbox row in %s", s, stdout.String())
		}
	}
	for _, s := range []string{bench.ScenarioColdCreateExec, bench.ScenarioExecRTT, bench.ScenarioCycleThroughput} {
		if !seen[s+"/"+bench.TargetBaseline] {
			t.Errorf("scenario %s: no baseline row", s)
		}
	}
	if seen[bench.ScenarioColdCreateExec+"/"+bench.TargetDocker] {
		t.Errorf("docker rows with --docker off")
	}
}
