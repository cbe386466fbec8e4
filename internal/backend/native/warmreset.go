package native

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The warm reset: a recycle that keeps the sandbox's init.
//
// A full recycle (Recycle) stops the sandbox and boots it again, which
// costs what a create and a destroy cost: almost all of it is starting
// the init and the agent. The warm reset keeps the running init (the
// agent, PID 1), its namespaces, cgroups and disk, and takes away
// everything a user can leave in them:
//
//  1. the agent kills every other process of the pid namespace and empties
//     the memory file systems (/tmp, /run, /dev/shm, additions to /dev);
//  2. the daemon checks what the agent cannot vouch for: the sandbox's
//     cgroup holds the agent alone, and its mount table is the one it
//     booted with;
//  3. the daemon empties the disk's writable directories (workspace, home,
//     root's home) and gives them back their owner, mode and no extended
//     attributes; truncates the agent's log; removes every System V and
//     POSIX IPC object; sets the host name back; destroys every TCP socket
//     left in the network namespace (TIME_WAIT ones included); and puts
//     the egress policy back;
//  4. the daemon sets the agent's resource limits, OOM score adjustment
//     and each thread's scheduling attributes, CPU affinity and I/O
//     priority back to what they were at boot (agentattrs.go);
//  5. the agent replaces its server with a new generation built from its
//     start configuration and the new access token: the environment set
//     by /init, code contexts, processes, PTYs, watchers and exec shims
//     were the old generation's, and every connection to it was cut.
//
// It applies to sandboxes whose every writable place is one of those: the
// host template with a read-only root, no host workspace directory and no
// writable host mounts. Anything unexpected on the way (a changed mount
// table, a /dev entry replaced, a file that cannot be removed) makes the
// caller fall back to the full recycle, which replaces all of it.
//
// What it keeps, by design: the pid namespace's pid counter, the inode
// numbers of the disk, and the cgroup's cumulative counters (CPU time,
// peaks) go on from the previous user's values (Stats reports them net of
// those: zeroStats); the agent's process is the
// same one (no process of the sandbox can trace it or read its memory: it
// is not dumpable), so what the old generation held is garbage in it.

// warmState is what a warm reset needs of a booted sandbox; nil when the
// sandbox cannot be warm reset.
type warmState struct {
	// control is the token the agent's reset routes answer to; it never
	// leaves the daemon and the agent (AGENTBOX_CONTROL_TOKEN).
	control string
	// mountinfo is the init's mount table right after boot.
	mountinfo []byte
	// agent is what the agent ran with at boot (see agentattrs.go).
	agent *agentAttrs
}

// warmEligible reports whether a sandbox of spec can be warm reset.
func (b *Backend) warmEligible(spec sandbox.Spec, tmpl sandbox.Template) bool {
	if b.cfg.NoWarmReset || b.rootless || tmpl.Kind != sandbox.TemplateHost || spec.WritableRoot || spec.WorkspaceDir != "" || spec.AgentListen != "" {
		return false
	}
	for _, m := range spec.Mounts {
		if !m.ReadOnly {
			return false
		}
	}
	return true
}

func newControlToken() (string, error) {
	var buf [24]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(buf[:]), nil
}

// warmReset resets bx in place for req (see above). An error means the
// sandbox is in no state to hand out: the caller recycles it in full.
func (b *Backend) warmReset(ctx context.Context, bx *box, req backend.RecycleRequest) error {
	ws := bx.warm
	if ws == nil || bx.pid <= 0 || bx.rec.Stopped || bx.rec.Paused {
		return errors.New("not warm-resettable")
	}
	// One use only: a failure below leaves it unknown.
	bx.warm = nil
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// One connection for both calls: /reset/kill cuts every other. (The
	// socket is the daemon's own, passed to the agent at boot.)
	agent := agentclient.New(agentclient.Endpoint{Network: "unix", Address: bx.paths.socket()}, "")
	defer agent.Close()

	if err := agent.ResetKill(ctx, ws.control); err != nil {
		return err
	}
	bx.phases.mark("warm: agent kills every other process, empties /tmp, /run, /dev/shm")
	// The namespaces' clean-up runs beside the checks and the disk (it
	// needs only that every process is dead); all must succeed.
	nsDone := make(chan error, 1)
	go func() { nsDone <- cleanNamespaces(bx.pid, hostnameOf(bx.rec.Spec), bx.paths.dir) }()
	if err := b.warmChecksAndDisk(bx, ws); err != nil {
		<-nsDone //nolint:errcheck // waits for it; the check's error is the one reported
		return err
	}
	if err := <-nsDone; err != nil {
		return err
	}
	bx.phases.mark("warm: checks, disk directories, IPC objects, host name, sockets")
	// Every other process is dead: nothing can change the agent again
	// before its next generation starts the next user's exec shim.
	if err := ws.agent.restore(bx.pid); err != nil {
		return fmt.Errorf("restore the agent's limits and priorities: %w", err)
	}
	bx.phases.mark("warm: agent's resource limits, priorities, affinity")
	if bx.rec.Spec.Network.Mode == sandbox.NetworkEgress && b.cfg.Network != nil {
		if err := b.cfg.Network.UpdatePolicy(ctx, bx.id, req.Network); err != nil {
			return fmt.Errorf("reset the egress policy: %w", err)
		}
		// After the policy: flows the previous user opened (an established
		// UDP flow passes whatever the policy) end here, and no process is
		// left to open another.
		if err := b.cfg.Network.ResetFlows(ctx, bx.id); err != nil {
			return fmt.Errorf("reset the sandbox's connection tracking: %w", err)
		}
		bx.phases.mark("warm: egress policy, connection tracking")
	}
	if err := agent.ResetRenew(ctx, ws.control, req.AccessToken); err != nil {
		return err
	}
	bx.phases.mark("warm: agent renewed (new server generation, new token)")
	bx.warm = ws
	b.zeroStats(bx)
	return nil
}

// zeroStats starts the sandbox's usage statistics again: the peak memory
// is reset where cgroup v1 allows it, the cumulative counters are
// remembered for Stats to subtract.
func (b *Backend) zeroStats(bx *box) {
	if !isCgroup2() {
		_ = os.WriteFile(filepath.Join(b.cgroupPaths(bx)["memory"], "memory.max_usage_in_bytes"), []byte("0"), 0)
	}
	st := b.rawStats(bx)
	bx.statsZero = &st
}

// warmChecksAndDisk checks that the sandbox's init is alone and its mount
// table unchanged, then empties its disk directories.
func (b *Backend) warmChecksAndDisk(bx *box, ws *warmState) error {
	if err := b.onlyInit(bx); err != nil {
		return err
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", bx.pid))
	if err != nil {
		return fmt.Errorf("read the sandbox's mount table: %w", err)
	}
	if !bytes.Equal(mi, ws.mountinfo) {
		return errors.New("the sandbox's mount table changed")
	}
	return b.resetDiskDirs(bx)
}

// onlyInit checks that the sandbox's cgroup holds its init alone.
func (b *Backend) onlyInit(bx *box) error {
	paths := b.cgroupPaths(bx)
	dir := paths[""]
	if dir == "" {
		dir = paths["pids"]
	}
	if dir == "" {
		return errors.New("no cgroup to check")
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("read the sandbox's cgroup: %w", err)
	}
	if got := strings.TrimSpace(string(data)); got != strconv.Itoa(bx.pid) {
		return fmt.Errorf("the sandbox's cgroup holds more than its init: %q", got)
	}
	return nil
}

// resetDiskDirs empties the writable directories of the disk and gives them
// their fresh owner, mode and times, without extended attributes; the
// agent's log starts empty.
func (b *Backend) resetDiskDirs(bx *box) error {
	if bx.disk == nil {
		return errors.New("the sandbox's disk is not mounted")
	}
	ids := b.idMap(bx.rec)
	for _, d := range diskDirs {
		switch d.path {
		case "workspace", "home", "roothome":
		default:
			continue // not writable by the sandbox (read-only root)
		}
		owner := ids.host(0)
		if d.user {
			owner = ids.host(sandboxUID)
		}
		if err := resetDir(int(bx.disk.Fd()), d.path, d.mode, owner); err != nil {
			return err
		}
	}
	if err := os.Truncate(bx.diskPath("agent.log"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("truncate the agent log: %w", err)
	}
	return nil
}

// maxResetDepth bounds the directory depth a reset walks; deeper trees are
// left to the full recycle.
const maxResetDepth = 128

func resetDir(rootFd int, name string, mode os.FileMode, owner int) error {
	fd, err := unix.Openat2(rootFd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return fmt.Errorf("open disk directory %s: %w", name, err)
	}
	defer unix.Close(fd)
	if err := removeContents(fd, 0); err != nil {
		return fmt.Errorf("empty disk directory %s: %w", name, err)
	}
	if err := unix.Fchown(fd, owner, owner); err != nil {
		return fmt.Errorf("chown %s: %w", name, err)
	}
	if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
		return fmt.Errorf("chmod %s: %w", name, err)
	}
	if err := removeXattrs(fd); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// The previous user's last change is not the next one's business.
	if err := unix.UtimesNanoAt(fd, "", nil, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("touch %s: %w", name, err)
	}
	return nil
}

// removeContents removes everything in the directory dirFd, never
// following a symbolic link (entries are removed, not resolved). It reads
// the directory again until a pass finds it empty, so nothing a removal
// during the listing made it skip is left behind.
func removeContents(dirFd, depth int) error {
	if depth > maxResetDepth {
		return errors.New("directory tree too deep")
	}
	for pass := 0; ; pass++ {
		removed, err := removePass(dirFd, depth)
		if err != nil || removed == 0 {
			return err
		}
		if pass == 8 {
			return errors.New("directory does not empty")
		}
	}
}

// removePass removes the entries one listing of dirFd returns, in batches.
func removePass(dirFd, depth int) (removed int, err error) {
	dup, err := unix.Dup(dirFd)
	if err != nil {
		return 0, err
	}
	dir := os.NewFile(uintptr(dup), "dir")
	defer dir.Close()
	if _, err := dir.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	for {
		names, err := dir.Readdirnames(512)
		for _, name := range names {
			if err := removeEntry(dirFd, name, depth); err != nil {
				return removed, err
			}
			removed++
		}
		if err == io.EOF || len(names) == 0 {
			return removed, nil
		}
		if err != nil {
			return removed, err
		}
	}
}

func removeEntry(dirFd int, name string, depth int) error {
	err := unix.Unlinkat(dirFd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	sub, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	err = removeContents(sub, depth+1)
	unix.Close(sub)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dirFd, name, unix.AT_REMOVEDIR); err != nil {
		return fmt.Errorf("remove directory %s: %w", name, err)
	}
	return nil
}

// removeXattrs removes every extended attribute of fd (ACLs included).
func removeXattrs(fd int) error {
	buf := make([]byte, 64<<10)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return fmt.Errorf("list extended attributes: %w", err)
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" {
			continue
		}
		if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("remove extended attribute %s: %w", name, err)
		}
	}
	return nil
}

// cleanNamespaces empties the sandbox's IPC namespace (System V objects
// and POSIX message queues), sets its host name back and destroys every
// TCP socket of its network namespace. It runs on a thread of its own
// that joins the sandbox's namespaces and is never handed back to the Go
// scheduler (it exits when done).
func cleanNamespaces(pid int, hostname, scratch string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread ends with the goroutine
		errc <- func() error {
			for _, ns := range []struct {
				name string
				kind int
			}{{"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS}, {"net", unix.CLONE_NEWNET}} {
				if err := joinNamespace(pid, ns.name, ns.kind); err != nil {
					return err
				}
			}
			if err := removeSysvIPC(); err != nil {
				return err
			}
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				return fmt.Errorf("set the host name back: %w", err)
			}
			if err := destroyTCPSockets(); err != nil {
				return err
			}
			// After the sockets: a destroyed connection updates the TCP
			// metrics of its peer.
			if err := forgetPeers(); err != nil {
				return err
			}
			// Last: it leaves the daemon's mount namespace for a copy.
			return removeMessageQueues(scratch)
		}()
	}()
	return <-errc
}

func joinNamespace(pid int, name string, kind int) error {
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the sandbox's %s namespace: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, kind); err != nil {
		return fmt.Errorf("join the sandbox's %s namespace: %w", name, err)
	}
	return nil
}

// removeSysvIPC removes every System V shared memory segment, message
// queue and semaphore set of the calling thread's IPC namespace.
func removeSysvIPC() error {
	for _, kind := range []string{"shm", "msg", "sem"} {
		data, err := os.ReadFile("/proc/sysvipc/" + kind)
		if err != nil {
			return fmt.Errorf("list System V %s objects: %w", kind, err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		for _, line := range lines[1:] { // a header first
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			id, err := strconv.Atoi(f[1])
			if err != nil {
				return fmt.Errorf("System V %s line %q: %w", kind, line, err)
			}
			var errno unix.Errno
			switch kind {
			case "shm":
				_, _, errno = unix.Syscall(unix.SYS_SHMCTL, uintptr(id), unix.IPC_RMID, 0)
			case "msg":
				_, _, errno = unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
			case "sem":
				_, _, errno = unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)
			}
			if errno != 0 && errno != unix.EINVAL && errno != unix.EIDRM {
				return fmt.Errorf("remove System V %s %d: %w", kind, id, errno)
			}
		}
	}
	return nil
}

// removeMessageQueues removes every POSIX message queue of the calling
// thread's IPC namespace. Queues are only listed through an mqueue file
// system, mounted here in a private mount namespace of this thread.
func removeMessageQueues(at string) error {
	if err := enterPrivateMountNS(); err != nil {
		return err
	}
	// Any directory of the copy will do (at is the sandbox's state
	// directory): the mount stays in this thread's namespace.
	if err := unix.Mount("mqueue", at, "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount the sandbox's mqueue: %w", err)
	}
	ents, err := os.ReadDir(at)
	if err != nil {
		return fmt.Errorf("list message queues: %w", err)
	}
	for _, e := range ents {
		if err := unix.Unlink(filepath.Join(at, e.Name())); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove message queue %s: %w", e.Name(), err)
		}
	}
	return nil
}

// destroyTCPSockets destroys every TCP socket of the calling thread's
// network namespace (SOCK_DESTROY, as `ss -K`): after every process is
// dead only the kernel's own are left — TIME_WAIT, FIN_WAIT and orphans —
// and they would show the next user the previous one's connections. It
// fails when any is left.
func destroyTCPSockets() error {
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		socks, err := netlink.SocketDiagTCP(family)
		if err != nil {
			return fmt.Errorf("list TCP sockets: %w", err)
		}
		for _, s := range socks {
			req := nl.NewNetlinkRequest(nl.SOCK_DESTROY, unix.NLM_F_ACK)
			req.AddData(&diagSocketID{family: family, id: s.ID})
			if _, err := req.Execute(unix.NETLINK_INET_DIAG, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("destroy TCP socket %s:%d-%s:%d: %w", s.ID.Source, s.ID.SourcePort, s.ID.Destination, s.ID.DestinationPort, err)
			}
		}
		left, err := netlink.SocketDiagTCP(family)
		if err != nil {
			return fmt.Errorf("list TCP sockets: %w", err)
		}
		if len(left) > 0 {
			return fmt.Errorf("%d TCP sockets left in the sandbox's network namespace", len(left))
		}
	}
	return nil
}

// diagSocketID is an inet_diag_req_v2 naming one TCP socket.
type diagSocketID struct {
	family uint8
	id     netlink.SocketID
}

func (d *diagSocketID) Len() int { return 56 }

func (d *diagSocketID) Serialize() []byte {
	b := make([]byte, 56)
	native := nl.NativeEndian()
	b[0], b[1] = d.family, unix.IPPROTO_TCP
	native.PutUint32(b[4:], 0xfff) // every state
	binary.BigEndian.PutUint16(b[8:], d.id.SourcePort)
	binary.BigEndian.PutUint16(b[10:], d.id.DestinationPort)
	putIP := func(dst []byte, ip net.IP) {
		if d.family == unix.AF_INET {
			copy(dst, ip.To4())
		} else {
			copy(dst, ip.To16())
		}
	}
	putIP(b[12:28], d.id.Source)
	putIP(b[28:44], d.id.Destination)
	native.PutUint32(b[44:], d.id.Interface)
	native.PutUint32(b[48:], d.id.Cookie[0])
	native.PutUint32(b[52:], d.id.Cookie[1])
	return b
}
