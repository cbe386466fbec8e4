package backendtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Security says what the security checks need to know of a backend.
type Security struct {
	// Backend is the backend under test (Harness.New's).
	Backend backend.Backend
	// Template must have python3, bash, dd and the coreutils.
	Template sandbox.Template
	// AgentInSandbox is where the agent binary is inside a sandbox (it
	// must be read-only there).
	AgentInSandbox string
	// AgentSocketHidden: the agent's socket is not reachable from inside
	// the sandbox (native passes it as a descriptor; Docker cannot).
	AgentSocketHidden bool
	// StateDir, when set, is the backend's state directory: no path under
	// it may show in a sandbox's /proc/self/mountinfo.
	StateDir string
}

// syscallProbe runs raw syscalls with ctypes and prints "name result" per
// line, result being OK or the errno name. Raw numbers keep libc wrappers
// (and their fallbacks) out of the way. x86_64 numbers.
const syscallProbe = `
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def probe(name, nr, *args):
    args = [ctypes.c_long(a) for a in args]
    r = libc.syscall(nr, *args)
    e = ctypes.get_errno()
    if r == 0 and name.startswith("clone"):
        os._exit(0)  # a child that should never have been created
    print(name, "OK" if r >= 0 else errno.errorcode.get(e, str(e)), flush=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x20000, 0x40000000, 17
buf = ctypes.create_string_buffer(128)
probe("mount", 165, ctypes.addressof(ctypes.create_string_buffer(b"none")), ctypes.addressof(ctypes.create_string_buffer(b"/tmp")), ctypes.addressof(ctypes.create_string_buffer(b"tmpfs")), 0, 0)
probe("umount2", 166, ctypes.addressof(ctypes.create_string_buffer(b"/proc")), 2)
probe("unshare_user", 272, CLONE_NEWUSER)
probe("unshare_mnt", 272, CLONE_NEWNS)
probe("clone_newuser", 56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
probe("clone_newnet", 56, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0)
probe("clone3", 435, ctypes.addressof(buf), 88)
probe("ptrace_attach", 101, 16, 1, 0, 0)
probe("init_module", 175, 0, 0, 0)
probe("finit_module", 313, 0, 0, 0)
probe("setns", 308, 0, 0)
probe("bpf", 321, 0, 0, 0)
probe("keyctl", 250, 0, 0, 0, 0, 0)
probe("io_uring_setup", 425, 8, ctypes.addressof(buf))
probe("perf_event_open", 298, ctypes.addressof(buf), 0, -1, -1, 0)
probe("userfaultfd", 323, 0)
probe("pivot_root", 155, 0, 0)
probe("reboot", 169, 0, 0, 0, 0)
probe("setuid0", 105, 0)
probe("kexec_load", 246, 0, 0, 0, 0)
probe("open_by_handle_at", 304, 0, 0, 0)
probe("settimeofday", 164, 0, 0)
`

// agentSignals are the signals a sandbox sends its PID 1, the agent.
const agentSignals = "HUP INT QUIT ILL TRAP ABRT BUS FPE USR1 SEGV USR2 PIPE ALRM TERM STKFLT XCPU XFSZ VTALRM PROF WINCH SYS STOP TSTP TTIN TTOU CONT KILL"

// RunSecurity runs the security checks every backend must pass: what a
// sandbox's code cannot do to the host, to its neighbours or to its agent.
// Backend-specific guarantees (disk caps where the backend has them, the
// agent socket, generated /etc) are checked when s says the backend has
// them, and by the backend's own tests.
func RunSecurity(t *testing.T, s Security) {
	b := s.Backend
	ctx := ctxT(t)
	neighbour := Create(t, b, sandbox.Spec{Template: s.Template})
	nc := Client(t, neighbour, "")
	neighbourOK := func(t *testing.T) {
		t.Helper()
		if r := Exec(t, nc, "echo alive"); r.Stdout != "alive\n" {
			t.Fatalf("neighbour sandbox broken: %+v", r)
		}
	}
	box := Create(t, b, sandbox.Spec{Template: s.Template, Resources: sandbox.Resources{
		MemoryBytes: 96 << 20, PIDs: 64, DiskBytes: 64 << 20, TmpBytes: 8 << 20}})
	c := Client(t, box, "")
	stats, _ := b.(backend.StatsReader)

	t.Run("Syscalls", func(t *testing.T) {
		if runtime.GOARCH != "amd64" {
			t.Skip("syscall numbers in the probe are x86_64")
		}
		r := Exec(t, c, "python3 -c '"+strings.ReplaceAll(syscallProbe, "'", `'"'"'`)+"'")
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				got[f[0]] = f[1]
			}
		}
		want := map[string]string{"clone3": "ENOSYS"}
		for _, name := range []string{"mount", "umount2", "unshare_user", "unshare_mnt", "clone_newuser",
			"clone_newnet", "ptrace_attach", "init_module", "finit_module", "setns", "bpf", "keyctl",
			"io_uring_setup", "perf_event_open", "userfaultfd", "pivot_root", "reboot", "setuid0",
			"kexec_load", "open_by_handle_at", "settimeofday"} {
			want[name] = "EPERM"
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: got %q, want %s (stdout %q stderr %q)", name, got[name], w, r.Stdout, r.Stderr)
			}
		}
		neighbourOK(t)
	})

	t.Run("ProcessCredentials", func(t *testing.T) {
		r := Exec(t, c, "grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
		for _, want := range []string{"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
			"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2",
			"Uid:\t1000\t1000\t1000\t1000"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("/proc/self/status lacks %q:\n%s", want, r.Stdout)
			}
		}
		// A setuid binary gains nothing (no_new_privs, nosuid).
		if r := Exec(t, c, "su -c id root </dev/null 2>&1; echo rc=$?"); strings.Contains(r.Stdout, "uid=0") {
			t.Fatalf("su gave root: %s", r.Stdout)
		}
	})

	t.Run("HostFiles", func(t *testing.T) {
		marker := filepath.Join("/root", "agentbox-test-marker-"+string(sandbox.NewID()))
		if err := os.WriteFile(marker, []byte("host secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(marker)
		r := Exec(t, c, fmt.Sprintf(
			"cat /etc/shadow 2>&1; echo rc=$?; cat %s 2>&1; echo rc=$?; ls -A /root /home 2>&1", marker))
		if strings.Contains(r.Stdout, "host secret") || strings.Contains(r.Stdout, "root:*") || strings.Contains(r.Stdout, "root:$") {
			t.Fatalf("host secrets visible: %s", r.Stdout)
		}
		if strings.Count(r.Stdout, "rc=1") != 2 {
			t.Fatalf("reading host files did not fail: %s", r.Stdout)
		}
		if s.AgentSocketHidden {
			// The agent's socket is not in the sandbox: its code cannot call
			// the agent's API or stand in for it.
			if r := Exec(t, c, "ls -A /run; ls /run/agentbox 2>&1"); strings.Contains(r.Stdout, "agent.sock") {
				t.Fatalf("agent socket visible inside the sandbox: %s", r.Stdout)
			}
		}
		r = Exec(t, c, "cat /proc/kcore 2>/dev/null | head -c 64 | wc -c")
		if !strings.HasPrefix(r.Stdout, "0\n") {
			t.Errorf("/proc/kcore readable: %q", r.Stdout)
		}
	})

	t.Run("HostInfoHidden", func(t *testing.T) {
		for _, p := range []string{"/proc/config.gz", "/proc/cmdline"} {
			host, err := os.ReadFile(p)
			if err != nil || len(host) == 0 {
				continue // this host has none to leak
			}
			// Empty (masked), or a kernel's of its own (gVisor's
			// synthetic one): never the host's.
			sum := sha256.Sum256(host)
			if r := Exec(t, c, "cat "+p+" 2>/dev/null | sha256sum"); strings.HasPrefix(r.Stdout, hex.EncodeToString(sum[:])) {
				t.Errorf("the host's %s readable in the sandbox: %+v", p, r)
			}
		}
		for _, p := range []string{"/sys/block", "/sys/class/block", "/sys/dev/block", "/sys/devices/virtual/block"} {
			if r := Exec(t, c, "ls -A "+p+" 2>/dev/null"); strings.TrimSpace(r.Stdout) != "" {
				t.Errorf("%s lists host block devices in the sandbox: %q", p, r.Stdout)
			}
		}
		if s.StateDir != "" {
			r := Exec(t, c, "cat /proc/self/mountinfo")
			for _, line := range strings.Split(r.Stdout, "\n") {
				if strings.Contains(line, s.StateDir) {
					t.Errorf("mountinfo shows the state dir %s: %s", s.StateDir, line)
				}
			}
		}
	})

	t.Run("ReadOnlyRoot", func(t *testing.T) {
		targets := []string{"/usr/agentbox-x", "/etc/agentbox-x", "/agentbox-x", s.AgentInSandbox}
		r := Exec(t, c, "for p in "+strings.Join(targets, " ")+"; do touch $p 2>&1; done; echo done")
		if n := strings.Count(r.Stdout, "Read-only file system") + strings.Count(r.Stdout, "Permission denied"); n != len(targets) {
			t.Fatalf("writes to the root filesystem not all refused: %s", r.Stdout)
		}
		if r := Exec(t, c, "touch /workspace/ok /tmp/ok /home/user/ok && echo writable"); r.Stdout != "writable\n" {
			t.Fatalf("writable dirs: %+v", r)
		}
	})

	t.Run("Network", func(t *testing.T) {
		ln, err := net.Listen("tcp", "0.0.0.0:0") //nolint:gosec // G102: the test's host service must be reachable on the host's other addresses, which a sandbox must not reach
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		addrs := []string{"127.0.0.1", "1.1.1.1", "169.254.169.254"}
		if ip := hostIP(); ip != "" {
			addrs = append(addrs, ip)
		}
		for _, a := range addrs {
			script := fmt.Sprintf(`python3 -c 'import socket; s=socket.socket(); s.settimeout(3)
try:
    s.connect(("%s", %d)); print("CONNECTED")
except OSError as e:
    print("refused", e.errno)'`, a, port)
			if r := Exec(t, c, script); !strings.HasPrefix(r.Stdout, "refused") {
				t.Errorf("connect to host %s:%d from a none-mode sandbox: %q %q", a, port, r.Stdout, r.Stderr)
			}
		}
	})

	t.Run("DiskCap", func(t *testing.T) {
		if b.Capabilities().DiskLimit {
			r := Exec(t, c, "dd if=/dev/zero of=/workspace/big bs=1M count=200 2>&1; echo rc=$?")
			if !strings.Contains(r.Stdout, "No space left on device") {
				t.Fatalf("writing past the disk cap: %s", r.Stdout)
			}
		}
		r := Exec(t, c, "dd if=/dev/zero of=/tmp/big bs=1M count=50 2>&1; echo rc=$?")
		if !strings.Contains(r.Stdout, "No space left on device") {
			t.Fatalf("writing past the /tmp cap: %s", r.Stdout)
		}
		Exec(t, c, "rm -f /workspace/big /tmp/big")
		neighbourOK(t)
	})

	t.Run("MemoryLimitOOM", func(t *testing.T) {
		if b.Capabilities().LimitsStopSandbox {
			testLimitStopsSandbox(t, b, s.Template, "python3 -c 'x = bytearray(400 << 20); print(len(x))'", "419430400")
			neighbourOK(t)
			return
		}
		if stats == nil {
			t.Skipf("the %s backend reports no stats", b.Name())
		}
		before, _ := stats.Stats(ctx, box.ID)
		r := Exec(t, c, "python3 -c 'x = bytearray(400 << 20); print(len(x))'; echo rc=$?")
		if strings.Contains(r.Stdout, "419430400") {
			t.Fatalf("allocated past the memory limit: %s", r.Stdout)
		}
		after, err := stats.Stats(ctx, box.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.OOMKills <= before.OOMKills {
			t.Fatalf("OOM kill not reported: before %d after %d (out %q)", before.OOMKills, after.OOMKills, r.Stdout)
		}
		if after.MemoryLimit != 96<<20 {
			t.Errorf("memory limit = %d", after.MemoryLimit)
		}
		if r := Exec(t, c, "echo still here"); r.Stdout != "still here\n" {
			t.Fatalf("sandbox unusable after OOM: %+v", r)
		}
		neighbourOK(t)
	})

	t.Run("ForkBomb", func(t *testing.T) {
		if b.Capabilities().LimitsStopSandbox {
			testLimitStopsSandbox(t, b, s.Template, "bomb() { bomb | bomb & }; bomb; sleep 5; echo survived", "survived")
			neighbourOK(t)
			return
		}
		if stats == nil {
			t.Skipf("the %s backend reports no stats", b.Name())
		}
		before, _ := stats.Stats(ctx, box.ID)
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := ExecErr(bctx, c, agentclient.StartOptions{Cmd: "/bin/bash",
			Args: []string{"-c", "bomb() { bomb | bomb & }; bomb; sleep 5"}, Timeout: 3 * time.Second})
		if err != nil {
			t.Fatalf("fork bomb exec: %v", err)
		}
		after, _ := stats.Stats(ctx, box.ID)
		if after.PidsLimitHits <= before.PidsLimitHits {
			t.Fatalf("pids limit not hit: before %d after %d", before.PidsLimitHits, after.PidsLimitHits)
		}
		if after.PidsLimit != 64 {
			t.Errorf("pids limit = %d", after.PidsLimit)
		}
		// The group was killed at the timeout; the sandbox recovers.
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/echo", Args: []string{"recovered"}})
			if err == nil && r.Stdout == "recovered\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox did not recover from the fork bomb: %+v %v", r, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		neighbourOK(t)
	})

	t.Run("SpinTimeout", func(t *testing.T) {
		r, err := ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh",
			Args: []string{"-c", "while :; do :; done"}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if r.Exit.Exited || r.Exit.ExitCode == 0 {
			t.Fatalf("spinning process not killed by timeout: %+v", r.Exit)
		}
		neighbourOK(t)
	})

	t.Run("NofileLimit", func(t *testing.T) {
		// A small open-files limit (not the daemon's), that no sandbox
		// process can raise past its hard limit (native's exact values and
		// their clamp are checked by its own tests).
		r := Exec(t, c, `ulimit -Sn; ulimit -Hn; h=$(ulimit -Hn); ulimit -Hn $((h+1)) 2>/dev/null && echo raised || echo refused; ulimit -Sn $((h+1)) 2>/dev/null && echo raised || echo refused`)
		f := strings.Fields(r.Stdout)
		if len(f) != 4 {
			t.Fatalf("unexpected output %q (stderr %q)", r.Stdout, r.Stderr)
		}
		var soft, hard int
		if _, err := fmt.Sscan(f[0]+" "+f[1], &soft, &hard); err != nil || soft > hard || hard > 4096 {
			t.Errorf("nofile soft/hard = %s/%s, want soft <= hard <= 4096", f[0], f[1])
		}
		if f[2] != "refused" || f[3] != "refused" {
			t.Errorf("a sandbox process raised its nofile limit past the hard limit: %q", r.Stdout)
		}
	})

	t.Run("RootOnRequest", func(t *testing.T) {
		testRootOnRequest(t, s, box, c, neighbourOK)
	})

	t.Run("AgentSurvivesSignals", func(t *testing.T) {
		for _, root := range []bool{false, true} {
			name := map[bool]string{false: "user", true: "root"}[root]
			t.Run(name, func(t *testing.T) {
				spec := sandbox.Spec{ID: sandbox.NewID(), Template: s.Template, Root: root}
				if root && !b.Capabilities().RootInUserNS {
					if _, err := b.Create(ctx, spec); sandbox.ClassOf(err) != sandbox.ClassInvalid {
						_ = b.Destroy(ctx, spec.ID)
						t.Fatalf("root sandbox without a user namespace: err = %v, want invalid_argument", err)
					}
					t.Skipf("the %s backend refuses root sandboxes here (no user namespace)", b.Name())
				}
				info := Create(t, b, spec)
				sc := Client(t, info, "")
				// Every signal twice, one kill per signal so that one
				// refusal does not stop the others; the sleep gives the
				// agent time to act on them.
				script := "for s in " + agentSignals + " " + agentSignals + "; do kill -s $s 1 2>/dev/null && echo sent $s; done; sleep 0.2; id -u"
				r, err := ExecErr(ctx, sc, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}})
				if err != nil {
					t.Fatalf("exec that signals PID 1: %v (stderr %q)", err, r.Stderr)
				}
				if root && !strings.Contains(r.Stdout, "sent TERM") {
					t.Fatalf("root could not even send SIGTERM to PID 1: %q", r.Stdout)
				}
				if after := Exec(t, sc, "echo alive"); after.Stdout != "alive\n" {
					t.Fatalf("agent no longer answers correctly: %+v", after)
				}
				got, err := b.Inspect(ctx, info.ID)
				if err != nil || got.State != sandbox.StateRunning {
					t.Fatalf("sandbox state after signals: %+v, %v", got, err)
				}
			})
		}
	})
}

// hostIP returns a non-loopback address of this host, if any.
func hostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// testLimitStopsSandbox: on a backend whose sandboxes stop as a whole
// past their memory or pids limit, cmd (which goes past one) never gets
// to print success, and the sandbox ends up stopped (not running and
// unreachable) with a reason. A sandbox of its own: the suite's shared
// one must outlive it.
func testLimitStopsSandbox(t *testing.T, b backend.Backend, tmpl sandbox.Template, cmd, success string) {
	ctx := ctxT(t)
	box := Create(t, b, sandbox.Spec{Template: tmpl, Resources: sandbox.Resources{MemoryBytes: 96 << 20, PIDs: 64}})
	c := Client(t, box, "")
	r, _ := ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/bash", Args: []string{"-c", cmd}, Timeout: 20 * time.Second})
	if strings.Contains(r.Stdout, success) {
		t.Fatalf("went past the limit: %s", r.Stdout)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := b.Inspect(ctx, box.ID)
		if err == nil && info.State == sandbox.StateStopped {
			t.Logf("stopped past its limit: %s", info.Reason)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox past its limit: state %q (%v), want stopped", info.State, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
