package loadtest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// Kernel is what the host's kernel holds that a long run can grow without
// the daemon's own figures showing it: cgroups removed but not yet freed
// (kept alive by charged page cache), the dentry cache and slab, loop
// devices, conntrack entries, and what the daemon keeps on disk. These are
// host-wide, so they are reported and compared over a run, not held to a
// baseline the way a daemon's own objects are (Leaks).
type Kernel struct {
	Dying        map[string]int // controller -> cgroups counted by the kernel but without a directory
	Dentries     int64          // nr_dentry of /proc/sys/fs/dentry-state
	SlabKiB      int64          // Slab of /proc/meminfo
	Loops        int            // loop devices with a backing file (any owner)
	Conntrack    int64          // nf_conntrack_count; -1 when conntrack is not loaded
	DataDirBytes int64          // bytes in the daemon's data dir
	StateBytes   int64          // the state database's file size (0 when it is elsewhere, e.g. Redis)
	// RemovedKiB is memory on the kernel's LRU lists (page cache,
	// anonymous pages) still charged to removed agentbox sandbox cgroups:
	// what keeps them dying. -1 when it cannot be read (not root).
	RemovedKiB int64
}

// TakeKernel reads the kernel counters and the data dir's size.
func TakeKernel(dataDir string) Kernel {
	k := Kernel{Dying: dyingCgroups(), Conntrack: -1, RemovedKiB: removedSandboxCgroupKiB()}
	if f := strings.Fields(readString("/proc/sys/fs/dentry-state")); len(f) > 0 {
		k.Dentries, _ = strconv.ParseInt(f[0], 10, 64)
	}
	k.SlabKiB = meminfo("Slab")
	if v, err := strconv.ParseInt(strings.TrimSpace(readString("/proc/sys/net/netfilter/nf_conntrack_count")), 10, 64); err == nil {
		k.Conntrack = v
	}
	if m, _ := filepath.Glob("/sys/block/loop*/loop/backing_file"); m != nil {
		k.Loops = len(m)
	}
	if dataDir != "" {
		_ = filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // a sandbox's dir going away mid-walk
			}
			if d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					k.DataDirBytes += info.Size()
					if d.Name() == "agentbox.db" {
						k.StateBytes += info.Size()
					}
				}
			}
			return nil
		})
	}
	return k
}

// String is one line of figures, controllers in a fixed order.
func (k Kernel) String() string {
	var dying []string
	for _, c := range slices.Sorted(maps.Keys(k.Dying)) {
		dying = append(dying, fmt.Sprintf("%s %d", c, k.Dying[c]))
	}
	ct := "n/a"
	if k.Conntrack >= 0 {
		ct = strconv.FormatInt(k.Conntrack, 10)
	}
	return fmt.Sprintf("dying cgroups [%s], held by removed sandbox cgroups %s MiB, dentries %d, slab %.1f MiB, loop devices %d, conntrack %s, data dir %.1f MiB, state db %.1f MiB",
		strings.Join(dying, ", "), k.RemovedMiB(), k.Dentries, float64(k.SlabKiB)/1024, k.Loops, ct, float64(k.DataDirBytes)/(1<<20), float64(k.StateBytes)/(1<<20))
}

// RemovedMiB is RemovedKiB in MiB for a report, "n/a" when unknown.
func (k Kernel) RemovedMiB() string {
	if k.RemovedKiB < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(k.RemovedKiB)/1024)
}

// DyingTotal is the dying cgroups of every controller.
func (k Kernel) DyingTotal() int {
	n := 0
	for _, v := range k.Dying {
		n += v
	}
	return n
}

// DyingMemory is the dying cgroups that hold memory: the memory
// controller's on v1, the unified hierarchy's on v2. (On v1 the blkio
// controller's rise under load and drain within a minute or two of it:
// they wait for the block layer's per-cgroup state of the sandboxes' loop
// devices to go.)
func (k Kernel) DyingMemory() int {
	if n, ok := k.Dying["unified"]; ok {
		return n
	}
	return k.Dying["memory"]
}

// dyingCgroups: on cgroup v1, /proc/cgroups' count per controller (which
// includes removed cgroups not yet freed) minus the directories of its
// hierarchy; on v2, the root's nr_dying_descendants, under "unified".
func dyingCgroups() map[string]int {
	out := map[string]int{}
	if s := readString("/sys/fs/cgroup/cgroup.stat"); s != "" {
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(line, "nr_dying_descendants "); ok {
				out["unified"], _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		return out
	}
	f, err := os.Open("/proc/cgroups")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || strings.HasPrefix(fields[0], "#") || fields[1] == "0" {
			continue
		}
		counted, err := strconv.Atoi(fields[2])
		if err != nil {
			continue
		}
		// Co-mounted controllers (cpu,cpuacct) are reached by a link.
		dir, err := filepath.EvalSymlinks(filepath.Join("/sys/fs/cgroup", fields[0]))
		if err != nil {
			continue // mounted elsewhere
		}
		dirs := 0
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs++
			}
			return nil
		})
		// A cgroup made between the two reads counts as a directory only.
		out[fields[0]] = max(counted-dirs, 0)
	}
	return out
}

// cgroupRoot is agentbox's cgroup below each hierarchy's root (see the
// native backend): backend parents below it, sandboxes below those.
const cgroupRoot = "agentbox"

// kpfLRU is KPF_LRU in /proc/kpageflags: the page is on an LRU list.
const kpfLRU = 1 << 5

// removedSandboxCgroupKiB adds up the LRU pages charged to removed
// agentbox sandbox cgroups. /proc/kpagecgroup names each page's memory
// cgroup by the inode of its directory — for a removed cgroup, of its
// nearest ancestor still there. The agentbox cgroup and the backend
// parents below it run no task of their own, so every LRU page named for
// one of them is a removed sandbox's. Root only: -1 otherwise.
func removedSandboxCgroupKiB() int64 {
	root := agentboxMemoryCgroup()
	parents := map[uint64]bool{}
	addIno := func(dir string) {
		var st unix.Stat_t
		if unix.Stat(dir, &st) == nil {
			parents[st.Ino] = true
		}
	}
	addIno(root)
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0 // no agentbox cgroup: nothing removed is held
	}
	for _, e := range entries {
		if e.IsDir() {
			addIno(filepath.Join(root, e.Name()))
		}
	}
	cgroupOf, err := os.Open("/proc/kpagecgroup")
	if err != nil {
		return -1
	}
	defer cgroupOf.Close()
	flagsOf, err := os.Open("/proc/kpageflags")
	if err != nil {
		return -1
	}
	defer flagsOf.Close()
	const chunk = 1 << 16 // pages per read, 8 bytes each
	inos, flags := make([]byte, 8*chunk), make([]byte, 8*chunk)
	var pages int64
	for off := int64(0); ; off += int64(len(inos)) {
		n, err := cgroupOf.ReadAt(inos, off)
		if n == 0 {
			if err != nil && err != io.EOF {
				return -1
			}
			break
		}
		if m, _ := flagsOf.ReadAt(flags[:n], off); m < n {
			n = m
		}
		for i := 0; i+8 <= n; i += 8 {
			if parents[binary.LittleEndian.Uint64(inos[i:])] && binary.LittleEndian.Uint64(flags[i:])&kpfLRU != 0 {
				pages++
			}
		}
		if err != nil {
			break
		}
	}
	return pages * int64(os.Getpagesize()) / 1024
}

// agentboxMemoryCgroup is agentbox's cgroup directory in the hierarchy
// that holds memory: the v1 memory controller's, or the unified one.
func agentboxMemoryCgroup() string {
	if occgroups.IsCgroup2UnifiedMode() {
		return filepath.Join("/sys/fs/cgroup", cgroupRoot)
	}
	return filepath.Join("/sys/fs/cgroup/memory", cgroupRoot)
}

func meminfo(key string) int64 {
	for _, line := range strings.Split(readString("/proc/meminfo"), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

func readString(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return string(b)
}
