package loadtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Target says where to look for what a daemon holds.
type Target struct {
	URL          string // for /metrics (go_goroutines, process_open_fds)
	MetricsToken string // METRICS_TOKEN
	PID          int    // the daemon process (fds and RSS from /proc)
	DataDir      string // AGENTBOX_DATA_DIR: mounts, loop devices, cgroups, state
	Bridge       string // NETWORK_BRIDGE: its veths and its nftables table ("" = none)
	TempDir      string // the daemon's TMPDIR, when the caller gave it one of its own
}

// Snapshot is what a daemon and the host hold at one moment.
type Snapshot struct {
	At         time.Time
	FDs        int
	Goroutines int
	RSS        int64
	// Host objects, by name, so a diff says what leaked.
	Sandboxes []string // sandboxes with a cgroup (any hierarchy): live ones, warm pool included
	Cgroups   []string // sandbox cgroups of this daemon, every hierarchy
	Mounts    []string // mount points under the data dir (overlays, disks, nsfs)
	Loops     []string // loop devices backed by a file in the data dir
	Veths     []string // links enslaved to the daemon's bridge
	NftRules  int      // lines of the daemon's nftables table
	TempFiles []string // entries of TempDir and of the data dir's sandbox state
	Processes int      // distinct processes in this daemon's sandbox cgroups
}

// Take records a snapshot. Metrics errors are returned; host probes that
// need a tool which is missing (ip, nft) leave their field empty.
func Take(ctx context.Context, t Target) (Snapshot, error) {
	s := Snapshot{At: time.Now()}
	var err error
	if s.FDs, err = countDir(fmt.Sprintf("/proc/%d/fd", t.PID)); err != nil {
		return s, fmt.Errorf("daemon fds: %w", err)
	}
	if s.RSS, err = rss(t.PID); err != nil {
		return s, fmt.Errorf("daemon rss: %w", err)
	}
	m, err := metrics(ctx, t.URL, t.MetricsToken)
	if err != nil {
		return s, err
	}
	s.Goroutines = int(m["go_goroutines"])
	s.Cgroups = cgroups(t.DataDir)
	pids := map[string]bool{}
	for _, cg := range s.Cgroups {
		if id := filepath.Base(cg); !slices.Contains(s.Sandboxes, id) {
			s.Sandboxes = append(s.Sandboxes, id)
		}
		if data, err := os.ReadFile(filepath.Join(cg, "cgroup.procs")); err == nil {
			for _, p := range strings.Fields(string(data)) {
				pids[p] = true
			}
		}
	}
	slices.Sort(s.Sandboxes)
	s.Processes = len(pids)
	s.Mounts = mountsUnder(t.DataDir)
	s.Loops = loopsUnder(t.DataDir)
	if t.Bridge != "" {
		s.Veths = bridgePorts(t.Bridge)
		s.NftRules = nftLines(t.Bridge)
	}
	if t.TempDir != "" {
		s.TempFiles = append(s.TempFiles, listNames(t.TempDir, "tmp/")...)
	}
	for _, sub := range []string{"native/state/sb", "native/disks"} {
		s.TempFiles = append(s.TempFiles, listNames(filepath.Join(t.DataDir, sub), sub+"/")...)
	}
	return s, nil
}

// String is one line of figures.
func (s Snapshot) String() string {
	return fmt.Sprintf("fds %d, goroutines %d, rss %.1f MiB, sandboxes %d (%d cgroups, %d processes), mounts %d, loops %d, veths %d, nft lines %d, temp files %d",
		s.FDs, s.Goroutines, float64(s.RSS)/(1<<20), len(s.Sandboxes), len(s.Cgroups), s.Processes, len(s.Mounts), len(s.Loops), len(s.Veths), s.NftRules, len(s.TempFiles))
}

// Bounds are how far a daemon may be from its baseline after a run, once
// idle: connections and caches the run warmed up legitimately remain.
type Bounds struct {
	FDs, Goroutines int
	RSS             int64
}

// DefaultBounds: a few idle keep-alive connections and their goroutines;
// RSS: Go returns freed heap to the kernel lazily, so the bound is on the
// growth, not on a return to the baseline.
var DefaultBounds = Bounds{FDs: 16, Goroutines: 40, RSS: 256 << 20}

// Leaks compares after with the baseline before. Daemon figures must be
// within b. On the host, a warm pool replaces the sandboxes it hands out,
// so sandbox objects are compared by count and by owner: no more live
// sandboxes than the baseline had, and every per-sandbox object (cgroup,
// mount, loop device, state directory, disk image, veth) belongs to a live
// sandbox; other objects must be exactly the baseline's. Each leak is one
// line.
func Leaks(before, after Snapshot, b Bounds) []string {
	var out []string
	if after.FDs > before.FDs+b.FDs {
		out = append(out, fmt.Sprintf("daemon fds %d -> %d (bound +%d)", before.FDs, after.FDs, b.FDs))
	}
	if after.Goroutines > before.Goroutines+b.Goroutines {
		out = append(out, fmt.Sprintf("daemon goroutines %d -> %d (bound +%d)", before.Goroutines, after.Goroutines, b.Goroutines))
	}
	if after.RSS > before.RSS+b.RSS {
		out = append(out, fmt.Sprintf("daemon rss %.1f -> %.1f MiB (bound +%d MiB)", float64(before.RSS)/(1<<20), float64(after.RSS)/(1<<20), b.RSS>>20))
	}
	if len(after.Sandboxes) > len(before.Sandboxes) {
		out = append(out, fmt.Sprintf("live sandboxes %d -> %d: %v", len(before.Sandboxes), len(after.Sandboxes), after.Sandboxes))
	}
	diff := func(what string, a, z []string) {
		for _, x := range z {
			if id := sandboxOf(x); id != "" {
				if !slices.Contains(after.Sandboxes, id) {
					out = append(out, fmt.Sprintf("%s of a sandbox that is gone: %s", what, x))
				}
				continue
			}
			if !slices.Contains(a, x) {
				out = append(out, fmt.Sprintf("%s left behind: %s", what, x))
			}
		}
	}
	diff("mount", before.Mounts, after.Mounts)
	diff("loop device", before.Loops, after.Loops)
	diff("temp file", before.TempFiles, after.TempFiles)
	if len(after.Veths) > len(before.Veths) {
		out = append(out, fmt.Sprintf("veths on the bridge %d -> %d: %v", len(before.Veths), len(after.Veths), after.Veths))
	}
	if after.NftRules > before.NftRules {
		out = append(out, fmt.Sprintf("nftables table grew: %d -> %d lines", before.NftRules, after.NftRules))
	}
	// Processes are shown, not compared: a warm sandbox starts its code
	// kernel lazily, so the count per live sandbox varies (a soak flagged
	// 3 -> 4 in the same two pool sandboxes). A process outliving its
	// sandbox keeps the sandbox's cgroup, which is checked above.
	return out
}

// sandboxOf returns the sandbox ID a per-sandbox path names (state
// directory native/state/sb/<id>, disk image native/disks/<id>.img), or "".
func sandboxOf(p string) string {
	for _, marker := range []string{"state/sb/", "disks/"} {
		if i := strings.Index(p, marker); i >= 0 {
			rest := p[i+len(marker):]
			id, _, _ := strings.Cut(rest, "/")
			return strings.TrimSuffix(id, ".img")
		}
	}
	return ""
}

// Settle takes snapshots until Leaks reports nothing or timeout passes
// (sandboxes are destroyed asynchronously, idle connections time out),
// and returns the last snapshot with its leaks.
func Settle(ctx context.Context, t Target, before Snapshot, b Bounds, timeout time.Duration) (Snapshot, []string, error) {
	deadline := time.Now().Add(timeout)
	for {
		after, err := Take(ctx, t)
		if err != nil {
			return after, nil, err
		}
		leaks := Leaks(before, after, b)
		if len(leaks) == 0 || time.Now().After(deadline) {
			return after, leaks, nil
		}
		select {
		case <-ctx.Done():
			return after, leaks, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func countDir(dir string) (int, error) {
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	return len(names), err
}

func rss(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// metrics reads the daemon's unlabelled gauges and counters (go_goroutines,
// process_open_fds, ...) from its /metrics.
func metrics(ctx context.Context, url, key string) (map[string]float64, error) {
	fams, err := readMetrics(ctx, url, key)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			if len(m.GetLabel()) != 0 {
				continue
			}
			switch {
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Untyped != nil:
				out[name] = m.GetUntyped().GetValue()
			}
		}
	}
	return out, nil
}

// cgroups lists the sandbox cgroups of the native backend of dataDir: it
// keeps them under agentbox/<first 12 hex of sha256(dataDir/native)>.
func cgroups(dataDir string) []string {
	sum := sha256.Sum256([]byte(filepath.Join(dataDir, "native")))
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/agentbox/" + hex.EncodeToString(sum[:6]) + "/*")
	var out []string
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

func mountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	slices.Sort(out)
	return out
}

func loopsUnder(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(data)), dir+"/") {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f)))+" "+strings.TrimSpace(string(data)))
		}
	}
	slices.Sort(out)
	return out
}

func bridgePorts(bridge string) []string {
	entries, err := os.ReadDir(filepath.Join("/sys/class/net", bridge, "brif"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func nftLines(table string) int {
	out, err := exec.Command("nft", "list", "table", "inet", table).Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "\n")
}

func listNames(dir, prefix string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, prefix+e.Name())
	}
	return out
}

// Sample takes a snapshot every interval until ctx ends and hands each to
// fn (the soak test's RSS and fd curve, the load test's peak figures).
// Snapshot errors (a daemon restarting) are skipped.
func Sample(ctx context.Context, t func() Target, every time.Duration, fn func(Snapshot)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if s, err := Take(ctx, t()); err == nil {
				fn(s)
			}
		}
	}
}
