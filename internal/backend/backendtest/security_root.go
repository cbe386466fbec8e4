package backendtest

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// rootProbe runs, as root of an ordinary sandbox, what root of a host
// could do and root of a sandbox must not: every line is "name result",
// the result OK or the errno name. Raw syscalls (x86_64 numbers) keep
// libc's wrappers and fallbacks out of the way; paths are created by the
// probe itself.
const rootProbe = `
import ctypes, errno, fcntl, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def name(e): return errno.errorcode.get(e, str(e))
keep = []  # buffers whose addresses are passed: alive until the end
def s(b):
    keep.append(ctypes.create_string_buffer(b))
    return ctypes.addressof(keep[-1])
def probe(n, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(n, "OK" if r >= 0 else name(ctypes.get_errno()), flush=True)
def attempt(n, fn):
    try:
        fn()
        print(n, "OK", flush=True)
    except OSError as e:
        print(n, name(e.errno), flush=True)
def write(path, data, flags=os.O_WRONLY):
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
MS_REMOUNT, MS_BIND, MS_RDONLY = 32, 4096, 1
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x20000
# The mount table: no new mount, no remount of the read-only root, no
# detaching, none of the new mount API.
probe("mount_tmpfs", 165, s(b"none"), s(b"/tmp"), s(b"tmpfs"), 0, 0)
probe("remount_usr_rw", 165, 0, s(b"/usr"), 0, MS_REMOUNT | MS_BIND, 0)
probe("umount_usr", 166, s(b"/usr"), 2)
probe("fsopen", 430, s(b"tmpfs"), 0)
probe("open_tree", 428, -100, s(b"/usr"), 1)
probe("move_mount", 429, -100, s(b"/usr"), -100, s(b"/tmp"), 0)
probe("mount_setattr", 442, -100, s(b"/usr"), 0, 0, 0)
probe("pivot_root", 155, s(b"/tmp"), s(b"/tmp"))
probe("chroot", 161, s(b"/tmp"))
# No namespaces of its own, no way into another.
probe("unshare_user", 272, CLONE_NEWUSER)
probe("unshare_mnt", 272, CLONE_NEWNS)
probe("setns", 308, 0, 0)
# No tracing or reading another process's memory (the agent's token).
probe("ptrace_attach_agent", 101, 16, 1, 0, 0)
probe("process_vm_readv_agent", 310, 1, 0, 0, 0, 0, 0)
attempt("read_agent_environ", lambda: open("/proc/1/environ", "rb").read())
attempt("open_agent_mem", lambda: open("/proc/1/mem", "rb").close())
# Its descriptors (the listening socket among them) may be listed, never
# opened or followed.
def open_agent_fds():
    fds = os.listdir("/proc/1/fd")
    if not fds:
        raise SystemExit("the agent has no descriptors to try")
    for fd in fds:
        os.close(os.open("/proc/1/fd/" + fd, os.O_RDONLY))
attempt("open_agent_fds", open_agent_fds)
attempt("readlink_agent_fd", lambda: os.readlink("/proc/1/fd/0"))
attempt("list_agent_root", lambda: os.listdir("/proc/1/root/"))
# No kernel modules, kexec, reboot, clocks, I/O ports, swap, accounting,
# the kernel log, BPF, perf, keys.
probe("init_module", 175, 0, 0, 0)
probe("finit_module", 313, 0, 0, 0)
probe("delete_module", 176, s(b"loop"), 0)
probe("kexec_load", 246, 0, 0, 0, 0)
probe("reboot", 169, 0xfee1dead, 672274793, 0x4321fedc, 0)
probe("settimeofday", 164, 0, 0)
probe("clock_settime", 227, 0, s(bytes(16)))
probe("iopl", 172, 3)
probe("ioperm", 173, 0, 1024, 1)
probe("swapon", 167, s(b"/tmp"), 0)
probe("acct", 163, s(b"/tmp/acct"))
probe("syslog_read", 103, 3, s(bytes(64)), 64)
probe("bpf", 321, 0, 0, 0)
probe("perf_event_open", 298, s(bytes(128)), 0, -1, -1, 0)
probe("keyctl", 250, 0, 0, 0, 0, 0)
# No devices, no host name, no raw or packet sockets, no interface changes.
probe("mknod_char", 133, s(b"/tmp/agentbox-root-dev"), 0o20600, 0x103)
probe("sethostname", 170, s(b"x"), 1)
attempt("raw_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
attempt("packet_socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())
attempt("lo_down", lambda: fcntl.ioctl(socket.socket(), 0x8914, struct.pack("16sH14s", b"lo", 0, bytes(14))))
# No ids outside the sandbox's range.
attempt("setuid_unmapped", lambda: os.setuid(65536))
attempt("setgid_unmapped", lambda: os.setgid(70000))
open("/tmp/agentbox-root-file", "w").close()
attempt("chown_unmapped", lambda: os.chown("/tmp/agentbox-root-file", 65536, 65536))
# No limits raised past the sandbox's, nobody else's changed, no
# priorities above the sandbox's.
rl = (ctypes.c_uint64 * 2)()
if libc.syscall(302, *[ctypes.c_long(a) for a in (0, 7, 0, ctypes.addressof(rl))]) != 0 or rl[1] == 0:
    raise SystemExit("read RLIMIT_NOFILE: %d" % ctypes.get_errno())
up = (ctypes.c_uint64 * 2)(rl[1] + 1, rl[1] + 1)
probe("raise_nofile", 302, 0, 7, ctypes.addressof(up), 0)
probe("prlimit_agent", 302, 1, 7, ctypes.addressof(rl), 0)
probe("nice_below_zero", 141, 0, 0, -5)
probe("sched_fifo", 144, 0, 1, s(struct.pack("i", 1)))
attempt("oom_protect_agent", lambda: write("/proc/1/oom_score_adj", b"-1000"))
# No host state through /proc and /sys: sysctls, sysrq, the cgroup.
attempt("sysctl_hostname", lambda: write("/proc/sys/kernel/hostname", b"x"))
attempt("sysctl_ip_forward", lambda: write("/proc/sys/net/ipv4/ip_forward", b"1"))
attempt("sysctl_drop_caches", lambda: write("/proc/sys/vm/drop_caches", b"3"))
attempt("sysrq", lambda: write("/proc/sysrq-trigger", b"h"))
attempt("sys_kernel", lambda: write("/sys/kernel/mm/transparent_hugepage/enabled", b"never"))
attempt("cgroup_procs", lambda: write("/sys/fs/cgroup/cgroup.procs", str(os.getpid()).encode()))
# The read-only root stays read-only: the permission checks pass (root),
# the file system refuses.
for n, p in [("create_usr", "/usr/agentbox-root-x"), ("create_etc", "/etc/agentbox-root-x"), ("create_root", "/agentbox-root-x")]:
    attempt(n, lambda p=p: write(p, b"x", os.O_WRONLY | os.O_CREAT))
attempt("write_passwd", lambda: write("/etc/passwd", b"evil::0:0::/:/bin/sh\n", os.O_WRONLY | os.O_APPEND))
attempt("chmod_passwd", lambda: os.chmod("/etc/passwd", 0o666))
attempt("write_hosts", lambda: write("/etc/hosts", b"1.2.3.4 x\n", os.O_WRONLY | os.O_APPEND))
attempt("write_agent", lambda: write(AGENT, b"x"))
attempt("rename_in_usr", lambda: os.rename("/usr/bin/env", "/usr/bin/env.x"))
`

// rootProbeWant is the result every line of rootProbe must have; several
// are allowed where the kernel's answer depends on the host (a file
// that is not there), never OK.
var rootProbeWant = map[string][]string{
	"mount_tmpfs": {"EPERM"}, "remount_usr_rw": {"EPERM"}, "umount_usr": {"EPERM"},
	"fsopen": {"EPERM"}, "open_tree": {"EPERM"}, "move_mount": {"EPERM"}, "mount_setattr": {"EPERM"},
	"pivot_root": {"EPERM"}, "chroot": {"EPERM"},
	"unshare_user": {"EPERM"}, "unshare_mnt": {"EPERM"}, "setns": {"EPERM"},
	"ptrace_attach_agent": {"EPERM"}, "process_vm_readv_agent": {"EPERM"},
	"read_agent_environ": {"EACCES", "EPERM"}, "open_agent_mem": {"EACCES", "EPERM"},
	"open_agent_fds": {"EACCES", "EPERM"}, "readlink_agent_fd": {"EACCES", "EPERM"}, "list_agent_root": {"EACCES", "EPERM"},
	"init_module": {"EPERM"}, "finit_module": {"EPERM"}, "delete_module": {"EPERM"},
	"kexec_load": {"EPERM"}, "reboot": {"EPERM"}, "settimeofday": {"EPERM"}, "clock_settime": {"EPERM"},
	"iopl": {"EPERM"}, "ioperm": {"EPERM"}, "swapon": {"EPERM"}, "acct": {"EPERM"},
	"syslog_read": {"EPERM"}, "bpf": {"EPERM"}, "perf_event_open": {"EPERM"}, "keyctl": {"EPERM"},
	"mknod_char": {"EPERM"}, "sethostname": {"EPERM"},
	"raw_socket": {"EPERM"}, "packet_socket": {"EPERM"}, "lo_down": {"EPERM"},
	"setuid_unmapped": {"EINVAL"}, "setgid_unmapped": {"EINVAL"}, "chown_unmapped": {"EINVAL"},
	"raise_nofile": {"EPERM"}, "prlimit_agent": {"EPERM"}, "nice_below_zero": {"EACCES", "EPERM"},
	"sched_fifo": {"EPERM"}, "oom_protect_agent": {"EACCES", "EPERM"},
	// Host files: EACCES where the file's owner is a host id the sandbox
	// does not map (root's CAP_DAC_OVERRIDE does not apply to it), EROFS
	// where the permission check passes and the mount refuses.
	"sysctl_hostname": {"EROFS", "EACCES"}, "sysctl_ip_forward": {"EROFS", "EACCES"},
	"sysctl_drop_caches": {"EROFS", "EACCES"}, "sysrq": {"EROFS", "EACCES", "ENOENT"},
	"sys_kernel": {"EROFS", "EACCES", "ENOENT"}, "cgroup_procs": {"EROFS", "EACCES", "ENOENT"},
	"create_usr": {"EROFS"}, "create_etc": {"EROFS"}, "create_root": {"EROFS"},
	"write_passwd": {"EROFS", "EACCES"}, "chmod_passwd": {"EROFS", "EPERM"}, "write_hosts": {"EROFS", "EACCES"},
	"write_agent": {"EROFS", "EACCES"}, "rename_in_usr": {"EROFS"},
}

// Capability bits (linux/capability.h) root of a sandbox may hold: the
// root set of the backends (see native's rootCapabilities) and nothing
// else.
const rootCapabilityMask = 1<<0 | 1<<1 | 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<8 | // chown, dac_override, fowner, fsetid, kill, setgid, setuid, setpcap
	1<<10 | 1<<29 | 1<<31 // net_bind_service, audit_write, setfcap

// testRootOnRequest checks a request for root in an ordinary sandbox c of
// b: where the backend serves it (Capabilities.RootOnRequest), root of
// the sandbox has no power over the host, its neighbours or the agent
// (run as root itself), and the sandbox's own user is unchanged; where it
// does not, the request is refused and the refusal says why.
func testRootOnRequest(t *testing.T, s Security, box sandbox.Info, c *agentclient.Client, neighbourOK func(*testing.T)) {
	b := s.Backend
	ctx := ctxT(t)
	asRoot := func(t *testing.T, script string) Result {
		t.Helper()
		r, err := ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}, User: "root"})
		if err != nil {
			t.Fatalf("exec as root %q: %v", script, err)
		}
		return r
	}
	if !b.Capabilities().RootOnRequest {
		_, err := ExecErr(ctx, c, agentclient.StartOptions{Cmd: "id", Args: []string{"-u"}, User: "root"})
		if sandbox.ClassOf(err) != sandbox.ClassForbidden || !strings.Contains(err.Error(), `cannot act as user "root": `) {
			t.Fatalf("a request for root in an ordinary %s sandbox: %v, want permission_denied saying why", b.Name(), err)
		}
		if _, err := c.Stat(ctx, "/", "root"); sandbox.ClassOf(err) != sandbox.ClassForbidden {
			t.Fatalf("a file operation as root in an ordinary %s sandbox: %v, want permission_denied", b.Name(), err)
		}
		return
	}

	t.Run("Identity", func(t *testing.T) {
		r := asRoot(t, "id -u; id -g; cat /proc/self/uid_map; grep -E '^(CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
		lines := strings.Split(r.Stdout, "\n")
		if len(lines) < 3 || lines[0] != "0" || lines[1] != "0" {
			t.Fatalf("not root: %q %q", r.Stdout, r.Stderr)
		}
		// Root of the sandbox is an unprivileged id of the host.
		if f := strings.Fields(lines[2]); len(f) != 3 || f[0] != "0" || f[1] == "0" {
			t.Fatalf("uid 0 of the sandbox is not an unprivileged host id: uid_map %q", lines[2])
		}
		for _, want := range []string{"CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("root's /proc/self/status lacks %q:\n%s", want, r.Stdout)
			}
		}
		for _, set := range []string{"CapPrm", "CapEff", "CapBnd"} {
			v := capSet(t, r.Stdout, set)
			if v&^rootCapabilityMask != 0 {
				t.Errorf("root's %s %#x holds capabilities beyond the root set %#x: %#x", set, v, uint64(rootCapabilityMask), v&^rootCapabilityMask)
			}
			if v&(1<<0) == 0 || v&(1<<1) == 0 {
				t.Errorf("root's %s %#x lacks chown or dac_override (root could not install packages)", set, v)
			}
		}
		// What the root set is for, in a network namespace of the
		// sandbox's own (network none): a port below 1024, which the
		// sandbox user may not bind.
		bind := `python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 80)); print("bound")' 2>&1 | tail -1`
		if r := asRoot(t, bind); r.Stdout != "bound\n" {
			t.Errorf("root could not bind port 80: %q", r.Stdout)
		}
		if r := Exec(t, c, bind); !strings.Contains(r.Stdout, "Permission denied") {
			t.Errorf("the sandbox user bound port 80: %q", r.Stdout)
		}
		// Everything that names no user stays the sandbox user, with no
		// capability at all, also right after root ran.
		d := Exec(t, c, "id -u; grep -E '^(CapPrm|CapEff|CapBnd):' /proc/self/status")
		if want := "1000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"; d.Stdout != want {
			t.Errorf("a command naming no user after root's: %q, want %q", d.Stdout, want)
		}
	})

	t.Run("NoHostPrivilege", func(t *testing.T) {
		if runtime.GOARCH != "amd64" {
			t.Skip("syscall numbers in the probe are x86_64")
		}
		script := "AGENT = " + strconv.Quote(s.AgentInSandbox) + "\n" + rootProbe
		r := asRoot(t, "python3 -c '"+strings.ReplaceAll(script, "'", `'"'"'`)+"'")
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				got[f[0]] = f[1]
			}
		}
		for name, want := range rootProbeWant {
			if !slices.Contains(want, got[name]) {
				t.Errorf("as root in the sandbox, %s: got %q, want %s (stderr %q)", name, got[name], strings.Join(want, " or "), r.Stderr)
			}
		}
		if len(got) != len(rootProbeWant) {
			t.Errorf("probe printed %d results, want %d", len(got), len(rootProbeWant))
		}
		if t.Failed() {
			t.Logf("the probe as root in the sandbox:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
		}
		// The same through the tools root would reach for.
		r = asRoot(t, "mount -o remount,rw /usr 2>&1; echo rc=$?; echo x > /usr/agentbox-root-y 2>&1; echo rc=$?; sysctl -w kernel.hostname=x 2>&1; echo rc=$?")
		if strings.Count(r.Stdout, "rc=0") != 0 {
			t.Errorf("root changed the read-only root or a sysctl with the usual tools: %s", r.Stdout)
		}
		neighbourOK(t)
	})

	t.Run("NoHostProcesses", func(t *testing.T) {
		r := asRoot(t, `for p in /proc/[0-9]*; do printf '%s ' "${p#/proc/}"; tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done`)
		self := filepath.Base(os.Args[0])
		var agent string
		for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			if strings.Contains(line, self) {
				t.Errorf("root in the sandbox sees a host process (%s): %q", self, line)
			}
			if pid, rest, _ := strings.Cut(line, " "); pid == "1" {
				agent = rest
			}
		}
		if !strings.HasPrefix(agent, s.AgentInSandbox+" ") {
			t.Errorf("PID 1 of the sandbox, as root sees it, is %q, want the agent:\n%s", agent, r.Stdout)
		}
		// Root's processes are in the sandbox's own cgroup, as the user's.
		if u, rt := Exec(t, c, "cat /proc/self/cgroup"), asRoot(t, "cat /proc/self/cgroup"); u.Stdout != rt.Stdout {
			t.Errorf("root's cgroup %q is not the sandbox user's %q", rt.Stdout, u.Stdout)
		}
	})

	t.Run("LimitsHold", func(t *testing.T) {
		stats, ok := b.(backend.StatsReader)
		if !ok {
			t.Skipf("the %s backend reports no stats", b.Name())
		}
		before, _ := stats.Stats(ctx, box.ID)
		r := asRoot(t, "python3 -c 'x = bytearray(400 << 20); print(len(x))'; echo rc=$?")
		if strings.Contains(r.Stdout, "419430400") {
			t.Fatalf("root allocated past the sandbox's memory limit: %s", r.Stdout)
		}
		after, err := stats.Stats(ctx, box.ID)
		if err != nil || after.OOMKills <= before.OOMKills {
			t.Fatalf("root's allocation was not stopped by the sandbox's memory limit: %+v %+v %v (%q)", before, after, err, r.Stdout)
		}
		neighbourOK(t)
	})

	t.Run("FilesOwnedByRoot", func(t *testing.T) {
		if _, err := c.Upload(ctx, "/workspace/agentbox-root-upload", "root", strings.NewReader("root's")); err != nil {
			t.Fatalf("upload as root: %v", err)
		}
		if info, err := c.Stat(ctx, "/workspace/agentbox-root-upload", ""); err != nil || info.Owner != "root" || info.Group != "root" {
			t.Fatalf("root's upload: %+v %v, want owned by root", info, err)
		}
		r := asRoot(t, "chmod 600 /workspace/agentbox-root-upload; stat -c '%u %g %a' /workspace/agentbox-root-upload")
		if r.Stdout != "0 0 600\n" {
			t.Fatalf("root's upload: %q %q", r.Stdout, r.Stderr)
		}
		// The sandbox user cannot read or replace what root keeps to itself.
		if u := Exec(t, c, "cat /workspace/agentbox-root-upload 2>&1; echo rc=$?"); !strings.Contains(u.Stdout, "Permission denied") {
			t.Errorf("the sandbox user read root's 0600 file: %q", u.Stdout)
		}
		if rc, _, err := c.Download(ctx, "/workspace/agentbox-root-upload", ""); sandbox.ClassOf(err) != sandbox.ClassForbidden {
			if rc != nil {
				rc.Close()
			}
			t.Errorf("a download naming no user of root's 0600 file: %v, want permission_denied", err)
		}
		asRoot(t, "rm -f /workspace/agentbox-root-upload /tmp/agentbox-root-file")
	})
}

// capSet parses one capability set line ("CapEff:\t...") of status.
func capSet(t *testing.T, status, name string) uint64 {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":\t"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in %q", name, status)
	return 0
}
