package native

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/native/usernsholder"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Every sandbox of a root daemon, root or not, runs in a user namespace of
// its own that maps its ids 0-65535 to a private range of host ids: no two
// sandboxes, and no host account, share a host uid, so per-user kernel
// limits (inotify instances and watches, pipe buffers, message queues)
// are per sandbox.
//
// The namespace is created by a process running as the range's first host
// id, not by root: the kernel charges a namespace's inotify instances (and
// other per-namespace counts) to the host user that owns the namespace, so
// a namespace owned by root would make every sandbox share root's budget
// (and starve the host's root).

const (
	// idRangeSize is how many ids each sandbox's user namespace maps.
	idRangeSize = 65536
	// DefaultIDBase and DefaultIDRanges place the sandboxes' ranges at
	// [2^30, 2^31): far above any account useradd creates (UID_MAX 60000,
	// subordinate ids up to 600100000), below 2^31 where some tools treat
	// ids as negative numbers.
	DefaultIDBase   = 1 << 30
	DefaultIDRanges = 1 << 14
	// legacyRootIDBase is the range root sandboxes created before per-sandbox
	// ranges all shared; their records carry no range of their own.
	legacyRootIDBase = 200000
	// secbitNoSetuidFixup (linux/securebits.h): a uid change keeps the
	// thread's capabilities.
	secbitNoSetuidFixup = 1 << 2
)

// idAllocator hands out host id ranges, one per sandbox, for as long as the
// sandbox (and so its disk) exists.
type idAllocator struct {
	base, count uint32
	mu          sync.Mutex
	used        map[uint32]sandbox.ID // range index → sandbox
	next        uint32                // where the search for a free range starts
}

// newIDAllocator starts the search at a place derived from the backend's
// state directory, so two daemons on one host (which should be given
// disjoint ranges) are unlikely to collide even when they are not.
func newIDAllocator(base, count uint32, root string) *idAllocator {
	h := fnv.New32a()
	h.Write([]byte(root))
	return &idAllocator{base: base, count: count, used: map[uint32]sandbox.ID{}, next: h.Sum32() % count}
}

// alloc returns the first host id of a free range for sandbox id. Ranges
// are handed out round-robin, so a freed range is reused as late as
// possible.
func (a *idAllocator) alloc(id sandbox.ID) (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := uint32(0); i < a.count; i++ {
		n := (a.next + i) % a.count
		if _, taken := a.used[n]; !taken {
			a.used[n] = id
			a.next = (n + 1) % a.count
			return a.base + n*idRangeSize, nil
		}
	}
	return 0, sandbox.Errorf(sandbox.ClassQuota, "all %d host id ranges are in use (one per sandbox, stopped ones included); raise SANDBOX_ID_RANGES", a.count)
}

// reserve marks every range overlapping [hostBase, hostBase+idRangeSize)
// as used by id: a sandbox found on disk keeps its range even if the
// configured base moved since it was created.
func (a *idAllocator) reserve(hostBase uint32, id sandbox.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.indexes(hostBase) {
		a.used[n] = id
	}
}

// restingOwner holds the range reserveResting keeps from sandboxes; not a
// valid sandbox id, so no sandbox's free ever releases it.
const restingOwner sandbox.ID = "-resting-"

// reserveResting keeps one range from every sandbox for as long as the
// allocator lives, and returns its first host id (0 when a single range is
// configured, which a sandbox needs). It takes the last range that no
// recorded sandbox holds, so it is the same range from one start to the
// next unless the configuration changes.
func (a *idAllocator) reserveResting() uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.count < 2 {
		return 0
	}
	for n := a.count - 1; n > 0; n-- {
		if _, taken := a.used[n]; !taken {
			a.used[n] = restingOwner
			return a.base + n*idRangeSize
		}
	}
	return 0
}

// RestingIDs returns the first host id of a range of 65536 host ids (uids
// and gids) that no sandbox is ever given and no host account has (the
// sandboxes' ranges are checked at start): an owner for files kept on the
// host between sandboxes, such as the build's cache mounts, that no
// process on the host runs as. ok is false for a rootless daemon or a
// single configured range.
func (b *Backend) RestingIDs() (base uint32, ok bool) {
	return b.restingIDs, b.restingIDs != 0
}

// free releases the range of sandbox id.
func (a *idAllocator) free(hostBase uint32, id sandbox.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.indexes(hostBase) {
		if a.used[n] == id {
			delete(a.used, n)
		}
	}
}

// indexes returns the ranges [hostBase, hostBase+idRangeSize) overlaps.
func (a *idAllocator) indexes(hostBase uint32) []uint32 {
	lo, hi := int64(hostBase), int64(hostBase)+idRangeSize-1
	var out []uint32
	for _, v := range []int64{lo, hi} {
		off := v - int64(a.base)
		if off < 0 || off >= int64(a.count)*idRangeSize {
			continue
		}
		n := uint32(off / idRangeSize)
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

// reserveRecorded reserves the ranges of every sandbox record under sbRoot:
// sandboxes a previous daemon left keep their ranges even before Recover.
func (a *idAllocator) reserveRecorded(sbRoot string) {
	entries, _ := os.ReadDir(sbRoot)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(sbRoot, e.Name(), "sandbox.json"))
		if err != nil {
			continue
		}
		var rec record
		if json.Unmarshal(data, &rec) == nil && rec.HostIDBase != 0 {
			a.reserve(rec.HostIDBase, sandbox.ID(e.Name()))
		}
	}
}

// validateIDRanges checks the configured ranges fit in 32 bits and lie
// clear of every account the host has or may create.
func validateIDRanges(etc string, base, count uint32) error {
	if err := CheckIDRanges(etc, base, count); err != nil {
		return fmt.Errorf("native: %w", err)
	}
	return nil
}

// CheckIDRanges reports whether the sandboxes' host id ranges, count
// ranges of 65536 ids from base (SANDBOX_ID_BASE, SANDBOX_ID_RANGES), fit
// in 32 bits and lie clear of every account and subordinate id range in
// the passwd, group, subuid and subgid files of etc and of the ranges its
// login.defs lets useradd allocate from: the check New makes as root, which
// agentbox doctor makes too.
func CheckIDRanges(etc string, base, count uint32) error {
	if count == 0 {
		return errors.New("the sandbox id range count must be positive")
	}
	hi := uint64(base) + uint64(count)*idRangeSize - 1
	if hi >= 1<<32-1 {
		return fmt.Errorf("sandbox id ranges %d-%d go past the largest host id; lower SANDBOX_ID_BASE or SANDBOX_ID_RANGES", base, hi)
	}
	if err := checkHostIDRange(etc, uint64(base), hi); err != nil {
		return fmt.Errorf("sandbox host ids %d-%d (SANDBOX_ID_BASE, SANDBOX_ID_RANGES × 65536) overlap host accounts: %w; choose a free range", base, hi, err)
	}
	return nil
}

// checkHostIDRange returns an error naming the first host account, or
// subordinate id range, or range useradd may allocate from (login.defs),
// that overlaps [lo, hi].
func checkHostIDRange(etc string, lo, hi uint64) error {
	overlaps := func(a, b uint64) bool { return a <= hi && b >= lo }
	// name:x:uid:gid... and name:x:gid:...
	for _, f := range []struct {
		file   string
		fields []int
	}{{"passwd", []int{2, 3}}, {"group", []int{2}}} {
		err := eachLine(filepath.Join(etc, f.file), func(fields []string) error {
			for _, i := range f.fields {
				if i >= len(fields) {
					continue
				}
				if id, err := strconv.ParseUint(fields[i], 10, 32); err == nil && overlaps(id, id) {
					return fmt.Errorf("%s entry %q has id %d", f.file, fields[0], id)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	// name:start:count
	for _, file := range []string{"subuid", "subgid"} {
		err := eachLine(filepath.Join(etc, file), func(fields []string) error {
			if len(fields) < 3 {
				return nil
			}
			start, err1 := strconv.ParseUint(fields[1], 10, 32)
			n, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 == nil && err2 == nil && n > 0 && overlaps(start, start+n-1) {
				return fmt.Errorf("%s entry %q has ids %d-%d", file, fields[0], start, start+n-1)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	defs := loginDefs(filepath.Join(etc, "login.defs"))
	for _, r := range [][2]string{{"UID_MIN", "UID_MAX"}, {"GID_MIN", "GID_MAX"}, {"SUB_UID_MIN", "SUB_UID_MAX"}, {"SUB_GID_MIN", "SUB_GID_MAX"}} {
		if overlaps(defs[r[0]], defs[r[1]]) {
			return fmt.Errorf("login.defs lets useradd allocate ids %d-%d (%s-%s)", defs[r[0]], defs[r[1]], r[0], r[1])
		}
	}
	return nil
}

// loginDefs reads the id ranges of login.defs, with shadow's defaults for
// what it does not set (or when it is missing).
func loginDefs(path string) map[string]uint64 {
	defs := map[string]uint64{
		"UID_MIN": 1000, "UID_MAX": 60000, "GID_MIN": 1000, "GID_MAX": 60000,
		"SUB_UID_MIN": 100000, "SUB_UID_MAX": 600100000, "SUB_GID_MIN": 100000, "SUB_GID_MAX": 600100000,
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return defs
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if _, ok := defs[f[0]]; ok {
			if n, err := strconv.ParseUint(f[1], 10, 32); err == nil {
				defs[f[0]] = n
			}
		}
	}
	return defs
}

// eachLine calls fn with the colon-separated fields of every non-comment
// line of path; a missing file has no lines.
func eachLine(path string, fn func([]string) error) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(strings.Split(line, ":")); err != nil {
			return err
		}
	}
	return sc.Err()
}

// nsHolder keeps a freshly made user namespace alive until the sandbox's
// init has joined it: a child stopped (ptrace) right after its execve, so
// it never runs a single instruction of the program.
type nsHolder struct{ proc *os.Process }

func (h *nsHolder) path() string { return "/proc/" + strconv.Itoa(h.proc.Pid) + "/ns/user" }

func (h *nsHolder) release() {
	_ = h.proc.Kill()
	_, _ = h.proc.Wait()
}

// newUserNamespace creates a user namespace owned by host uid ids.base with
// ids' mapping. exe is any program the sandbox's ids may execute (it is
// never run).
func newUserNamespace(exe string, ids idMap) (*nsHolder, error) {
	proc, err := startAsOwner(exe, ids.base, ids.gidBase)
	if err != nil {
		return nil, fmt.Errorf("create user namespace: %w", err)
	}
	h := &nsHolder{proc: proc}
	dir := "/proc/" + strconv.Itoa(proc.Pid)
	for _, m := range []struct {
		file string
		base uint32
	}{{"uid_map", ids.base}, {"gid_map", ids.gidBase}} {
		line := fmt.Sprintf("0 %d %d\n", m.base, ids.size)
		if err := os.WriteFile(filepath.Join(dir, m.file), []byte(line), 0); err != nil {
			h.release()
			return nil, fmt.Errorf("write user namespace %s: %w", m.file, err)
		}
	}
	return h, nil
}

// startAsOwner starts exe in a new user namespace owned by host user
// uid/gid. The process stops (ptrace) right after its execve.
func startAsOwner(exe string, uid, gid uint32) (*os.Process, error) {
	var proc *os.Process
	err := asHostUser(uid, gid, func() error {
		// Without copying the daemon where the kernel and build allow;
		// os.StartProcess forks.
		pid, err := usernsholder.Start(exe)
		if err == nil {
			proc, err = os.FindProcess(pid)
			return err
		}
		if !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, unix.EINVAL) {
			return err
		}
		proc, err = os.StartProcess(exe, []string{"agentbox-userns"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER,
			Ptrace:     true, // stop at the exec: the program never runs
			Pdeathsig:  syscall.SIGKILL,
		}})
		return err
	})
	if err != nil && proc != nil {
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, err
	}
	return proc, err
}

// asHostUser runs fn on an OS thread whose effective ids are uid/gid.
// Credentials are per thread on Linux: the raw syscalls below change this
// thread only, and the thread goes back to the Go scheduler only once its
// ids are the daemon's again.
func asHostUser(uid, gid uint32, fn func() error) error {
	runtime.LockOSThread()
	euid, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
	egid, _, _ := unix.RawSyscall(unix.SYS_GETEGID, 0, 0, 0)
	// Keep the thread's capabilities across the uid change, so what it
	// creates is made by a privileged process (some LSMs restrict user
	// namespaces made by unprivileged ones).
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	changedBits := err == nil && bits&secbitNoSetuidFixup == 0 &&
		unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits|secbitNoSetuidFixup), 0, 0, 0) == nil
	err = setThreadIDs(uid, gid)
	if err == nil {
		err = fn()
	}
	rerr := setThreadIDs(uint32(euid), uint32(egid))
	if rerr == nil && changedBits {
		rerr = unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0)
	}
	if now, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0); rerr == nil && now != euid {
		rerr = fmt.Errorf("thread euid is %d after restoring %d", now, euid)
	}
	if rerr != nil {
		// Never hand a thread with foreign ids back to the scheduler: it
		// stays locked, and Go ends it with this goroutine.
		return fmt.Errorf("restore daemon credentials: %w", rerr)
	}
	runtime.UnlockOSThread()
	return err
}

// setThreadIDs sets the calling thread's effective uid and gid (real and
// saved ids stay, so the daemon's can be restored). The gid changes first
// while the thread may still change it, or last when going back.
func setThreadIDs(uid, gid uint32) error {
	keep := ^uintptr(0) // -1: unchanged
	cur, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
	setGID := func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep); e != 0 {
			return fmt.Errorf("setresgid %d: %w", gid, e)
		}
		return nil
	}
	setUID := func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
			return fmt.Errorf("setresuid %d: %w", uid, e)
		}
		return nil
	}
	if cur == 0 {
		if err := setGID(); err != nil {
			return err
		}
		return setUID()
	}
	if err := setUID(); err != nil {
		return err
	}
	return setGID()
}

// reownTree gives the sandbox the files of dir (a host directory used as
// its /workspace, such as a DEFAULT_MOUNT_DIR workspace reused by a
// restored session): entries owned by an id of another sandbox's range, or
// by uid/gid 1000 as before per-sandbox ranges, move to the same id in
// this sandbox's range. Other owners (host accounts) are left alone.
// Symlinks are never followed; os.Root keeps the walk inside dir.
func (b *Backend) reownTree(dir string, ids idMap) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open workspace dir: %w", err)
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		uid, uok := b.sandboxInnerID(st.Uid)
		gid, gok := b.sandboxInnerID(st.Gid)
		if !uok && !gok {
			return nil
		}
		newUID, newGID := -1, -1
		if uok {
			newUID = int(ids.base) + int(uid)
		}
		if gok {
			newGID = int(ids.gidBase) + int(gid)
		}
		if newUID == int(st.Uid) && newGID == int(st.Gid) {
			return nil
		}
		if err := root.Lchown(p, newUID, newGID); err != nil {
			return fmt.Errorf("chown workspace: %w", err)
		}
		return nil
	})
}

// sandboxInnerID returns the in-sandbox id a host id stands for, if it
// belongs to a sandbox: any id of the ranges, or the sandbox user's 1000 of
// sandboxes created before per-sandbox ranges.
func (b *Backend) sandboxInnerID(host uint32) (uint32, bool) {
	a := b.idRanges
	if host >= a.base && uint64(host) < uint64(a.base)+uint64(a.count)*idRangeSize {
		return (host - a.base) % idRangeSize, true
	}
	if host == sandboxUID {
		return sandboxUID, true
	}
	return 0, false
}

// prepareMountpoints creates, as the daemon, the mount points the sandbox's
// init needs in its root filesystem: the init runs as the sandbox's
// (unprivileged) root and cannot create them in directories owned by the
// host's root. os.Root refuses paths that leave rootfs through symlinks a
// writable root may contain.
func prepareMountpoints(rootfs string, mounts []specs.Mount) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("open root filesystem: %w", err)
	}
	defer root.Close()
	var earlier []string
	for _, m := range mounts {
		dest := filepath.Clean(m.Destination)
		nested := false
		for _, e := range earlier {
			// Inside an earlier mount the mount point is not on rootfs.
			nested = nested || hasPathPrefix(dest, e)
		}
		earlier = append(earlier, dest)
		rel := strings.TrimPrefix(dest, "/")
		if rel == "" || nested {
			continue
		}
		if _, err := root.Lstat(rel); err == nil {
			continue
		}
		isFile := false
		if m.Type == "bind" {
			if st, err := os.Stat(m.Source); err == nil && !st.IsDir() {
				isFile = true
			}
		}
		dir := rel
		if isFile {
			dir = filepath.Dir(rel)
		}
		if dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("create mount point %s: %w", m.Destination, err)
			}
		}
		if isFile {
			f, err := root.OpenFile(rel, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("create mount point %s: %w", m.Destination, err)
			}
			f.Close()
		}
	}
	return nil
}

// netnsSysfsDir is where the sysfs of a sandbox's network namespace is
// mounted on the host (see mountNetnsSysfs).
func netnsSysfsDir(p boxPaths) string { return filepath.Join(p.dir, "sysfs") }

// mountNetnsSysfs mounts, at dir, a read-only sysfs whose network view is
// that of the network namespace at netnsPath. A sandbox in a user namespace
// may not mount sysfs for a network namespace the host's user namespace
// owns (the networking's), so the daemon mounts it and the sandbox gets a
// bind mount of it.
func mountNetnsSysfs(netnsPath, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unmountAll(dir); err != nil { // an earlier boot's
		return err
	}
	ns, err := os.Open(netnsPath)
	if err != nil {
		return fmt.Errorf("open sandbox netns: %w", err)
	}
	defer ns.Close()
	// The caller's mount namespace, where the mount must go: it is the
	// sandbox's private one (mountns.go), not the daemon's that a fresh
	// thread is in.
	mnt, err := os.Open("/proc/thread-self/ns/mnt")
	if err != nil {
		return fmt.Errorf("open mount namespace: %w", err)
	}
	defer mnt.Close()
	done := make(chan error, 1)
	go func() {
		// This thread joins the sandbox's network namespace and never leaves
		// it: it stays locked, and Go ends it when the goroutine returns.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- fmt.Errorf("unshare fs: %w", err)
			return
		}
		if err := unix.Setns(int(mnt.Fd()), unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("join mount namespace: %w", err)
			return
		}
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("join sandbox netns: %w", err)
			return
		}
		err := unix.Mount("sysfs", dir, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		if err != nil {
			err = fmt.Errorf("mount sysfs for sandbox netns: %w", err)
		}
		done <- err
	}()
	return <-done
}

// useNetnsSysfs replaces the sandbox's own sysfs mount with a bind mount
// of the one mountNetnsSysfs made.
func useNetnsSysfs(s *specs.Spec, dir string) {
	for i, m := range s.Mounts {
		if m.Destination == "/sys" && m.Type == "sysfs" {
			s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "bind", Source: dir,
				Options: []string{"rbind", "ro", "nosuid", "noexec", "nodev"}}
		}
	}
}
