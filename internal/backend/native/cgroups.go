package native

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/cgroupfs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

func isCgroup2() bool { return cgroups.IsCgroup2UnifiedMode() }

// cgroupHierarchyRoots returns the directories under which sandboxes'
// cgroups live: one per v1 hierarchy, or the single v2 root.
func (b *Backend) cgroupHierarchyRoots() []string {
	if isCgroup2() {
		return []string{filepath.Join("/sys/fs/cgroup", b.cgroupParent)}
	}
	mounts, err := cgroups.GetCgroupMounts(false)
	if err != nil {
		return nil
	}
	var roots []string
	for _, m := range mounts {
		roots = append(roots, filepath.Join(m.Mountpoint, b.cgroupParent))
	}
	// A hybrid host also has a controller-less v2 tree where libcontainer
	// places every sandbox; it must be cleaned like the others.
	if cgroups.IsCgroup2HybridMode() {
		roots = append(roots, filepath.Join("/sys/fs/cgroup/unified", b.cgroupParent))
	}
	return roots
}

// cgroupChildren lists the sandbox ids that have a cgroup in any hierarchy.
func (b *Backend) cgroupChildren() []string {
	seen := map[string]bool{}
	var ids []string
	for _, root := range b.cgroupHierarchyRoots() {
		entries, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() && !seen[e.Name()] && sandbox.ID(e.Name()).Validate() == nil {
				seen[e.Name()] = true
				ids = append(ids, e.Name())
			}
		}
	}
	return ids
}

// removeStaleCgroups kills every process left in a sandbox's cgroups and
// removes them. Used when libcontainer's own state is gone.
func (b *Backend) removeStaleCgroups(id string) {
	for _, root := range b.cgroupHierarchyRoots() {
		dir := filepath.Join(root, id)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		for attempt := 0; attempt < 50; attempt++ {
			pids, _ := cgroups.GetAllPids(dir)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			time.Sleep(20 * time.Millisecond)
		}
		reclaimDir(dir) // as reclaimBeforeRemove, for this hierarchy
		_ = cgroups.RemovePath(dir)
	}
}

// cgroupPaths returns the sandbox's cgroup directories by controller ("" for
// v2). They only depend on the backend and the id, so they are computed
// once per sandbox and kept (exec reads the limit counters twice per run).
func (b *Backend) cgroupPaths(bx *box) map[string]string {
	if bx.cgPaths != nil {
		return bx.cgPaths
	}
	paths := map[string]string{}
	if isCgroup2() {
		paths[""] = filepath.Join("/sys/fs/cgroup", b.cgroupParent, string(bx.id))
	} else {
		mounts, _ := cgroups.GetCgroupMounts(false)
		for _, m := range mounts {
			for _, s := range m.Subsystems {
				paths[s] = filepath.Join(m.Mountpoint, b.cgroupParent, string(bx.id))
			}
		}
	}
	bx.cgPaths = paths
	return paths
}

// reclaimBeforeRemove empties a dead sandbox's memory cgroup of the page
// cache still charged to it (files its processes read: the template's
// binaries and libraries, its disk). The kernel does not move those pages
// to the parent when the cgroup is removed: they keep the removed cgroup
// alive ("dying", counted in /proc/cgroups and cgroup.stat) until memory
// pressure reclaims them, and every destroyed sandbox left some behind —
// hundreds after a soak, each one more for the kernel to walk on every
// charge and reclaim. Best effort: what cannot be reclaimed stays, and the
// cgroup dies later as before.
func (b *Backend) reclaimBeforeRemove(bx *box) {
	p := b.cgroupPaths(bx)
	dir := p["memory"]
	if isCgroup2() {
		dir = p[""]
	}
	if dir == "" {
		return
	}
	// A sandbox reattached after a daemon restart has no exit to wait
	// for: its processes may still be dying from the SIGKILL, and a
	// cgroup with tasks cannot be emptied. Bounded: at worst the cgroup
	// is left to die later, as before.
	for attempt := 0; attempt < 50; attempt++ {
		if pids, err := cgroups.GetAllPids(dir); err != nil || len(pids) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	reclaimDir(dir)
}

// reclaimDir reclaims what it can of the memory charged to cgroup dir, a
// v2 cgroup or a v1 memory cgroup (a no-op for other controllers' dirs).
func reclaimDir(dir string) {
	if usage := cgroupfs.ReadInt(filepath.Join(dir, "memory.current")); usage > 0 {
		_ = os.WriteFile(filepath.Join(dir, "memory.reclaim"), []byte(strconv.FormatInt(usage, 10)), 0)
		return
	}
	// v1: with no task left, force_empty reclaims every page it can and
	// returns; it is refused (EBUSY) while a task remains.
	if f := filepath.Join(dir, "memory.force_empty"); cgroupfs.ReadInt(filepath.Join(dir, "memory.usage_in_bytes")) > 0 {
		_ = os.WriteFile(f, []byte("0"), 0)
	}
}

// oomKills returns how many processes the OOM killer killed in the sandbox.
func (b *Backend) oomKills(bx *box) int64 {
	p := b.cgroupPaths(bx)
	if isCgroup2() {
		return cgroupfs.ReadKey(filepath.Join(p[""], "memory.events"), "oom_kill")
	}
	return cgroupfs.ReadKey(filepath.Join(p["memory"], "memory.oom_control"), "oom_kill")
}

// pidsLimitHits returns how many forks the pids limit refused.
func (b *Backend) pidsLimitHits(bx *box) int64 {
	p := b.cgroupPaths(bx)
	if isCgroup2() {
		return cgroupfs.ReadKey(filepath.Join(p[""], "pids.events"), "max")
	}
	return cgroupfs.ReadKey(filepath.Join(p["pids"], "pids.events"), "max")
}

// LimitCounters implements backend.LimitCounter: the two counters an exec
// compares before and after, without the rest of Stats. It reads them from
// files kept open (limitFiles): opening them anew was about a sixth of the
// daemon's CPU per `exec true`.
func (b *Backend) LimitCounters(ctx context.Context, id sandbox.ID) (oomKills, pidsLimitHits int64, err error) {
	bx, err := b.lookup(id)
	if err != nil {
		return 0, 0, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	// Twice at most: files opened before a restart or a recycle belong to
	// cgroups that were removed since (teardown closes them, this is the
	// safety net), and a failed read drops them for a fresh open.
	for range 2 {
		if bx.limits == nil {
			if bx.limits, err = b.openLimitFiles(bx); err != nil {
				break
			}
		}
		oom, oerr := bx.limits.oom.Key("oom_kill")
		pids, perr := bx.limits.pids.Key("max")
		if oerr == nil && perr == nil {
			return oom, pids, nil
		}
		bx.closeLimitFiles()
	}
	// A controller this host lacks: read the way Stats does (0 if absent).
	return b.oomKills(bx), b.pidsLimitHits(bx), nil
}

// limitFiles are a running sandbox's OOM-kill and pids-limit counter files.
type limitFiles struct {
	oom, pids *cgroupfs.File
}

// openLimitFiles opens the counter files oomKills and pidsLimitHits read.
func (b *Backend) openLimitFiles(bx *box) (*limitFiles, error) {
	p := b.cgroupPaths(bx)
	oomPath, pidsPath := filepath.Join(p["memory"], "memory.oom_control"), filepath.Join(p["pids"], "pids.events")
	if isCgroup2() {
		oomPath, pidsPath = filepath.Join(p[""], "memory.events"), filepath.Join(p[""], "pids.events")
	}
	oom, err := cgroupfs.Open(oomPath)
	if err != nil {
		return nil, err
	}
	pids, err := cgroupfs.Open(pidsPath)
	if err != nil {
		oom.Close()
		return nil, err
	}
	return &limitFiles{oom: oom, pids: pids}, nil
}

// closeLimitFiles closes the counter files (teardown: the cgroups go).
func (bx *box) closeLimitFiles() {
	if bx.limits != nil {
		bx.limits.oom.Close()
		bx.limits.pids.Close()
		bx.limits = nil
	}
}

// Stats implements backend.StatsReader.
func (b *Backend) Stats(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return backend.Stats{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	s := b.rawStats(bx)
	if z := bx.statsZero; z != nil {
		// Counted since the last warm reset: the previous user's are not
		// the next one's business.
		s.CPUSeconds = max(s.CPUSeconds-z.CPUSeconds, 0)
		s.OOMKills = max(s.OOMKills-z.OOMKills, 0)
		s.PidsLimitHits = max(s.PidsLimitHits-z.PidsLimitHits, 0)
		if s.NetworkDenials >= z.NetworkDenials {
			s.NetworkDenials -= z.NetworkDenials
		}
		if s.NetworkTxBytes >= z.NetworkTxBytes && s.NetworkRxBytes >= z.NetworkRxBytes {
			s.NetworkTxBytes -= z.NetworkTxBytes
			s.NetworkRxBytes -= z.NetworkRxBytes
		}
	}
	return s, nil
}

// rawStats reads the sandbox's usage as its cgroup and network count it,
// from boot. The caller holds bx.mu.
func (b *Backend) rawStats(bx *box) backend.Stats {
	var s backend.Stats
	p := b.cgroupPaths(bx)
	if isCgroup2() {
		dir := p[""]
		s.MemoryBytes = cgroupfs.ReadInt(filepath.Join(dir, "memory.current"))
		s.MemoryMaxBytes = cgroupfs.ReadInt(filepath.Join(dir, "memory.peak"))
		s.MemoryLimit = cgroupfs.ReadInt(filepath.Join(dir, "memory.max"))
		s.OOMKills = cgroupfs.ReadKey(filepath.Join(dir, "memory.events"), "oom_kill")
		s.CPUSeconds = float64(cgroupfs.ReadKey(filepath.Join(dir, "cpu.stat"), "usage_usec")) / 1e6
		s.Pids = cgroupfs.ReadInt(filepath.Join(dir, "pids.current"))
		s.PidsLimit = cgroupfs.ReadInt(filepath.Join(dir, "pids.max"))
		s.PidsLimitHits = cgroupfs.ReadKey(filepath.Join(dir, "pids.events"), "max")
	} else {
		mem := p["memory"]
		s.MemoryBytes = cgroupfs.ReadInt(filepath.Join(mem, "memory.usage_in_bytes"))
		s.MemoryMaxBytes = cgroupfs.ReadInt(filepath.Join(mem, "memory.max_usage_in_bytes"))
		s.MemoryLimit = cgroupfs.ReadInt(filepath.Join(mem, "memory.limit_in_bytes"))
		s.OOMKills = cgroupfs.ReadKey(filepath.Join(mem, "memory.oom_control"), "oom_kill")
		s.CPUSeconds = float64(cgroupfs.ReadInt(filepath.Join(p["cpuacct"], "cpuacct.usage"))) / 1e9
		s.Pids = cgroupfs.ReadInt(filepath.Join(p["pids"], "pids.current"))
		s.PidsLimit = cgroupfs.ReadInt(filepath.Join(p["pids"], "pids.max"))
		s.PidsLimitHits = cgroupfs.ReadKey(filepath.Join(p["pids"], "pids.events"), "max")
	}
	if b.cfg.Network != nil && bx.rec.Spec.Network.Mode == sandbox.NetworkEgress {
		s.NetworkDenials = b.cfg.Network.Denials(bx.id)
		s.NetworkTxBytes, s.NetworkRxBytes = b.cfg.Network.Traffic(bx.id)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(bx.diskPath("workspace"), &fs); err == nil && bx.diskMounted() {
		s.DiskTotalBytes = int64(fs.Blocks) * fs.Bsize
		s.DiskUsedBytes = int64(fs.Blocks-fs.Bfree) * fs.Bsize
	}
	return s
}

// canLowerOOMScore reports whether this process has CAP_SYS_RESOURCE.
func canLowerOOMScore() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}
