package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
)

// idleReport is what `agentbox bench --idle N` prints: the cost of one
// operation with no other sandbox and with N idle ones, and what the N
// idle sandboxes cost the machine and the daemon.
type idleReport struct {
	Idle           int     `json:"idle"`
	CreateP50At0   float64 `json:"create_p50_ms_at_0"`
	CreateP50AtN   float64 `json:"create_p50_ms_at_n"`
	ExecP50At0     float64 `json:"exec_p50_ms_at_0"`
	ExecP50AtN     float64 `json:"exec_p50_ms_at_n"`
	FillSeconds    float64 `json:"fill_seconds"`
	FillLastP50    float64 `json:"fill_last_100_create_p50_ms"`
	DaemonRSSMiB0  float64 `json:"daemon_rss_mib_at_0"`
	DaemonRSSMiBN  float64 `json:"daemon_rss_mib_at_n"`
	DaemonThreads0 int     `json:"daemon_threads_at_0"`
	DaemonThreadsN int     `json:"daemon_threads_at_n"`
	DaemonFDs0     int     `json:"daemon_fds_at_0"`
	DaemonFDsN     int     `json:"daemon_fds_at_n"`
	Goroutines0    int     `json:"daemon_goroutines_at_0"`
	GoroutinesN    int     `json:"daemon_goroutines_at_n"`
	// Mounts in the daemon's mount namespace: what every new sandbox's
	// namespace starts as a copy of.
	DaemonMounts0     int     `json:"daemon_mounts_at_0"`
	DaemonMountsN     int     `json:"daemon_mounts_at_n"`
	PerSandboxPSSKiB  float64 `json:"per_sandbox_pss_kib"`
	PerSandboxMemKiB  float64 `json:"per_sandbox_cgroup_charge_kib"`
	PerSandboxKmemKiB float64 `json:"per_sandbox_kernel_memory_kib"`
	PerSandboxHostKiB float64 `json:"per_sandbox_host_memavailable_kib"`
	DestroySeconds    float64 `json:"destroy_all_seconds"`
	// Phases: p50 wall ms of each create/destroy step at 0 and at N.
	Phases map[string][2]float64 `json:"phases_p50_ms_at_0_and_n"`
}

// phaseRecorder collects native.PhaseSample wall times by "op: phase".
type phaseRecorder struct {
	mu  sync.Mutex
	got map[string][]time.Duration
}

func (p *phaseRecorder) add(s native.PhaseSample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.got != nil {
		k := s.Op + ": " + s.Phase
		p.got[k] = append(p.got[k], s.Wall)
	}
}

// take returns the p50 of each phase since the last take and starts over.
func (p *phaseRecorder) take() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]float64{}
	for k, v := range p.got {
		out[k] = ms(bench.Summarize("", v).P50)
	}
	p.got = map[string][]time.Duration{}
	return out
}

// runBenchIdle fills an in-process daemon with idle sandboxes, one after
// another through the API, and measures create (cold, no pool) and exec
// `true` latency before and after, and the per-sandbox idle cost. The
// daemon runs in this process so that its threads and goroutines can be
// counted; the sandboxes are destroyed at the end.
func runBenchIdle(ctx context.Context, out io.Writer, count, n int) error {
	agentPath, err := daemon.FindAgent(os.Getenv("AGENT_PATH"))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "abx-idle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	_ = os.Chmod(tmp, 0o711)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cfg, err := config.Load("", nil, map[string]string{
		"AGENTBOX_DATA_DIR": filepath.Join(tmp, "api"), "AGENT_PATH": agentPath, "POOL_SIZE": "0",
		"MAX_SANDBOX_INSTANCES": "0", "MAX_SANDBOXES_PER_USER": "0", "AUTO_CLEANUP": "true",
		// Idle sandboxes write nothing: their sparse disks may promise more than the disk holds.
		"DISK_OVERCOMMIT": "100",
		"PORT":            strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
	})
	if err != nil {
		ln.Close()
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- daemon.Run(runCtx, daemon.Options{Config: cfg, Logger: quiet, Listener: ln, Ready: ready})
	}()
	defer func() { stop(); <-done }() //nolint:errcheck // waits for the sampler to stop
	select {
	case <-ready:
	case err := <-done:
		return err
	}
	c, err := client.New("http://" + ln.Addr().String())
	if err != nil {
		return err
	}
	var ids []string
	defer func() {
		// Normally empty: the destroy below is measured.
		for _, id := range ids {
			_ = c.Delete(context.WithoutCancel(ctx), id)
		}
	}()
	measure := func() (createP50, execP50 float64, err error) {
		// Only the create is timed; the delete follows untimed.
		var creates []time.Duration
		for i := 0; i < n+2; i++ {
			start := time.Now()
			sb, err := c.Create(ctx, client.CreateRequest{Timeout: time.Hour})
			if err != nil {
				return 0, 0, err
			}
			if i >= 2 { // two warm-up runs
				creates = append(creates, time.Since(start))
			}
			if err := c.Delete(ctx, sb.ID); err != nil {
				return 0, 0, err
			}
		}
		createP50 = ms(bench.Summarize("", creates).P50)
		sb, err := c.Create(ctx, client.CreateRequest{Timeout: time.Hour})
		if err != nil {
			return 0, 0, err
		}
		defer func() { _ = c.Delete(ctx, sb.ID) }()
		ex, err := bench.APIExecRoundTrip(ctx, c, sb.ID, []string{"true"}, n*5)
		return createP50, ms(bench.Summarize("", ex).P50), err
	}
	var r idleReport
	r.Idle = count
	rec := &phaseRecorder{}
	native.SetPhaseHook(rec.add)
	defer native.SetPhaseHook(nil)
	rec.take()
	if r.CreateP50At0, r.ExecP50At0, err = measure(); err != nil {
		return err
	}
	at0 := rec.take()
	rec.mu.Lock()
	rec.got = nil // not while filling
	rec.mu.Unlock()
	memAvail0 := memAvailableKiB()
	r.DaemonRSSMiB0, r.DaemonThreads0, r.DaemonFDs0, r.Goroutines0 = selfStats()
	r.DaemonMounts0 = selfMounts()
	fmt.Fprintf(os.Stderr, "at 0: create p50 %.2f ms, exec p50 %.2f ms; filling %d idle sandboxes\n", r.CreateP50At0, r.ExecP50At0, count)
	fillStart := time.Now()
	var last []time.Duration
	for i := 0; i < count; i++ {
		t0 := time.Now()
		sb, err := c.Create(ctx, client.CreateRequest{Timeout: time.Hour})
		if err != nil {
			return fmt.Errorf("idle sandbox %d: %w", i, err)
		}
		if i >= count-100 {
			last = append(last, time.Since(t0))
		}
		ids = append(ids, sb.ID)
		if (i+1)%250 == 0 {
			fmt.Fprintf(os.Stderr, "  %d idle, %.0f s\n", i+1, time.Since(fillStart).Seconds())
		}
	}
	r.FillSeconds = time.Since(fillStart).Seconds()
	r.FillLastP50 = ms(bench.Summarize("", last).P50)
	time.Sleep(2 * time.Second) // let the agents settle into idle
	rec.take()
	fmt.Fprintf(os.Stderr, "measuring with %d idle sandboxes\n", count)
	if r.CreateP50AtN, r.ExecP50AtN, err = measure(); err != nil {
		return err
	}
	r.Phases = map[string][2]float64{}
	for k, v := range rec.take() {
		r.Phases[k] = [2]float64{at0[k], v}
	}
	r.DaemonRSSMiBN, r.DaemonThreadsN, r.DaemonFDsN, r.GoroutinesN = selfStats()
	r.DaemonMountsN = selfMounts()
	var pss, charge, kmem float64
	for _, id := range ids {
		p, c, k := sandboxIdleCost(id)
		pss, charge, kmem = pss+p, charge+c, kmem+k
	}
	r.PerSandboxPSSKiB = pss / float64(count)
	r.PerSandboxMemKiB = charge / float64(count)
	r.PerSandboxKmemKiB = kmem / float64(count)
	r.PerSandboxHostKiB = float64(memAvail0-memAvailableKiB()) / float64(count)
	delStart := time.Now()
	for len(ids) > 0 {
		if err := c.Delete(ctx, ids[len(ids)-1]); err != nil {
			return err
		}
		ids = ids[:len(ids)-1]
	}
	r.DestroySeconds = time.Since(delStart).Seconds()
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// selfStats returns this process's RSS (MiB), OS threads, open fds and
// goroutines.
func selfStats() (rss float64, threads, fds, goroutines int) {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			kb, _ := strconv.ParseFloat(f[1], 64)
			rss = kb / 1024
		case "Threads:":
			threads, _ = strconv.Atoi(f[1])
		}
	}
	entries, _ := os.ReadDir("/proc/self/fd")
	return rss, threads, len(entries), runtime.NumGoroutine()
}

// selfMounts counts the mounts of this process's mount namespace.
func selfMounts() int {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	return strings.Count(string(data), "\n")
}

func memAvailableKiB() int64 {
	data, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

// sandboxIdleCost returns the PSS of the sandbox's processes, its memory
// cgroup's charge and the kernel memory in it (KiB; cgroup v1 names, v2's
// memory.current and memory.stat's kernel on a v2 host).
func sandboxIdleCost(id string) (pss, charge, kmem float64) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/memory/agentbox/*/" + id)
	v2 := false
	if len(dirs) == 0 {
		dirs, _ = filepath.Glob("/sys/fs/cgroup/agentbox/*/" + id)
		v2 = true
	}
	if len(dirs) == 0 {
		return 0, 0, 0
	}
	dir := dirs[0]
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, p := range strings.Fields(string(procs)) {
		pss += float64(kvKiB(filepath.Join("/proc", p, "smaps_rollup"), "Pss:"))
	}
	if v2 {
		charge = float64(readBytes(filepath.Join(dir, "memory.current"))) / 1024
		kmem = float64(kvKiB(filepath.Join(dir, "memory.stat"), "kernel")) / 1024
		return pss, charge, kmem
	}
	charge = float64(readBytes(filepath.Join(dir, "memory.usage_in_bytes"))) / 1024
	kmem = float64(readBytes(filepath.Join(dir, "memory.kmem.usage_in_bytes"))) / 1024
	return pss, charge, kmem
}

func readBytes(path string) int64 {
	data, _ := os.ReadFile(path)
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// kvKiB reads the number after key in a "key value [kB]" file.
func kvKiB(path, key string) int64 {
	data, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
