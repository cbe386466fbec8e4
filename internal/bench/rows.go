package bench

import (
	"context"
	"sync"
	"time"
)

// Row is one line of `agentbox bench --json`: a scenario measured against
// one target (agentbox, docker or baseline, the bare fork/exec of the same
// command). OpsPerS is set for throughput scenarios only.
type Row struct {
	Scenario string   `json:"scenario"`
	Target   string   `json:"target"`
	N        int      `json:"n"`
	P50ms    float64  `json:"p50_ms"`
	P99ms    float64  `json:"p99_ms"`
	OpsPerS  *float64 `json:"ops_per_s,omitempty"`
}

// Targets and scenarios of the JSON rows.
const (
	TargetAgentbox = "agentbox"
	TargetDocker   = "docker"
	TargetBaseline = "baseline"

	ScenarioColdCreateExec  = "cold_create_exec"
	ScenarioExecRTT         = "exec_rtt"
	ScenarioPoolCreate      = "pool_create"
	ScenarioRecycle         = "recycle"
	ScenarioCycleThroughput = "cycle_throughput"
	// ScenarioCycleRecycled is cycle_throughput against a daemon whose
	// warm pool recycles (POOL_MAX_USES): the deletes reset sandboxes and
	// the creates take them from the pool again.
	ScenarioCycleRecycled = "cycle_throughput_recycled"
	// ScenarioRun is `agentbox run -- python3 -c 'print(1)'` as a whole
	// process, without a server (baseline: the bare command as a process).
	ScenarioRun = "run"
	// ScenarioRunServer is the same run through a server (--url) whose
	// warm pool recycles.
	ScenarioRunServer = "run_server"
)

// Scenarios lists every scenario `agentbox bench --json` reports for
// target agentbox.
var Scenarios = []string{ScenarioColdCreateExec, ScenarioExecRTT, ScenarioPoolCreate, ScenarioRecycle, ScenarioCycleThroughput, ScenarioCycleRecycled, ScenarioRun, ScenarioRunServer}

// NewRow summarizes samples as a Row; rate > 0 sets OpsPerS.
func NewRow(scenario, target string, samples []time.Duration, rate float64) Row {
	r := Summarize(scenario, samples)
	row := Row{Scenario: scenario, Target: target, N: r.N, P50ms: msf(r.P50), P99ms: msf(r.P99)}
	if rate > 0 {
		row.OpsPerS = &rate
	}
	return row
}

func msf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// ParallelThroughput runs op from `clients` goroutines for d and returns
// completed ops per second and each op's latency; the first error stops
// the run.
func ParallelThroughput(ctx context.Context, clients int, d time.Duration, op func(context.Context) error) (float64, []time.Duration, error) {
	var (
		mu      sync.Mutex
		samples []time.Duration
		firstEr error
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.Now().Add(d)
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				err := op(ctx)
				mu.Lock()
				if err != nil {
					if firstEr == nil {
						firstEr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				samples = append(samples, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return float64(len(samples)) / time.Since(start).Seconds(), samples, firstEr
}
