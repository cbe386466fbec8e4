// Package bench measures agentbox against the references it replaces: bare
// fork/exec and Docker. It backs both `go test -bench` and `agentbox bench`.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Result is the latency distribution of one measured operation.
type Result struct {
	Name    string
	N       int
	P50     time.Duration
	P99     time.Duration
	Mean    time.Duration
	Comment string
}

// Summarize computes a Result from samples.
func Summarize(name string, samples []time.Duration) Result {
	if len(samples) == 0 {
		return Result{Name: name}
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Result{Name: name, N: len(s), P50: pct(s, 0.50), P99: pct(s, 0.99), Mean: sum / time.Duration(len(s))}
}

func pct(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted)-1)*p + 0.5)
	return sorted[i]
}

// Markdown renders results as a table row each.
func Markdown(results []Result) string {
	var b strings.Builder
	b.WriteString("| operation | n | p50 | p99 | mean | note |\n|---|---:|---:|---:|---:|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", r.Name, r.N, ms(r.P50), ms(r.P99), ms(r.Mean), r.Comment)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// Measure runs op n times (after warm warm-up runs) and returns its latencies.
func Measure(n, warm int, op func() error) ([]time.Duration, error) {
	for i := 0; i < warm; i++ {
		if err := op(); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := op(); err != nil {
			return out, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// PythonPrint is the command of the cold-start benchmarks.
// The absolute path makes the bare-host reference run the very same
// interpreter as the sandbox (a PATH lookup on a developer machine may find
// a pyenv shim instead).
var PythonPrint = []string{"/usr/bin/python3", "-c", "print(1)"}

// ColdCreateExecDestroy creates a sandbox, runs cmd in it through the agent,
// and destroys it.
func ColdCreateExecDestroy(ctx context.Context, b backend.Backend, cmd []string) error {
	id := sandbox.NewID()
	info, err := b.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()})
	if err != nil {
		return err
	}
	defer func() { _ = b.Destroy(ctx, id) }()
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
	defer c.Close()
	res, err := c.Run(ctx, agentclient.StartOptions{Cmd: cmd[0], Args: cmd[1:]}, nil, io.Discard, io.Discard)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%v exited %d", cmd, res.ExitCode)
	}
	return b.Destroy(ctx, id)
}

// ExecRoundTrip runs cmd in an existing sandbox through its agent.
func ExecRoundTrip(ctx context.Context, c *agentclient.Client, cmd []string) error {
	res, err := c.Run(ctx, agentclient.StartOptions{Cmd: cmd[0], Args: cmd[1:]}, nil, io.Discard, io.Discard)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%v exited %d", cmd, res.ExitCode)
	}
	return nil
}

// BareExec runs cmd on the host with fork/exec, the floor of any sandbox.
func BareExec(cmd []string) error {
	return exec.Command(cmd[0], cmd[1:]...).Run()
}

// IdleMemory reports the memory an idle sandbox costs: the resident set of
// its processes (the agent) and its cgroup's total charge (agent, kernel
// objects, page cache of its files).
type IdleMemory struct {
	RSSBytes    int64
	PSSBytes    int64 // RSS with shared pages (the agent binary) split among sharers
	CgroupBytes int64
}

// SandboxMemory measures one running sandbox given its init pid and stats.
func SandboxMemory(ctx context.Context, b backend.Backend, id sandbox.ID) (IdleMemory, error) {
	info, err := b.Inspect(ctx, id)
	if err != nil {
		return IdleMemory{}, err
	}
	var m IdleMemory
	for _, pid := range descendants(info.Pid) {
		m.RSSBytes += statusKB(pid, "status", "VmRSS:")
		m.PSSBytes += statusKB(pid, "smaps_rollup", "Pss:")
	}
	if sr, ok := b.(backend.StatsReader); ok {
		if st, err := sr.Stats(ctx, id); err == nil {
			m.CgroupBytes = st.MemoryBytes
		}
	}
	return m, nil
}

// descendants returns pid and every process below it.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid ...
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statusKB reads a "Key: N kB" line of /proc/<pid>/<file> in bytes.
func statusKB(pid int, file, key string) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
