package native

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

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

func TestSecurityEscapes(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)

	neighbour := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	nc := backendtest.Client(t, neighbour, "")
	neighbourOK := func(t *testing.T) {
		t.Helper()
		if r := backendtest.Exec(t, nc, "echo alive"); r.Stdout != "alive\n" {
			t.Fatalf("neighbour sandbox broken: %+v", r)
		}
	}

	box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Resources: sandbox.Resources{
		MemoryBytes: 96 << 20, PIDs: 64, DiskBytes: 64 << 20, TmpBytes: 8 << 20}})
	c := backendtest.Client(t, box, "")

	t.Run("Syscalls", func(t *testing.T) {
		if runtime.GOARCH != "amd64" {
			t.Skip("syscall numbers in the probe are x86_64")
		}
		r := backendtest.Exec(t, c, "python3 -c '"+strings.ReplaceAll(syscallProbe, "'", `'"'"'`)+"'")
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
		r := backendtest.Exec(t, c, "grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
		for _, want := range []string{"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
			"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2",
			"Uid:\t1000\t1000\t1000\t1000"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("/proc/self/status lacks %q:\n%s", want, r.Stdout)
			}
		}
		// A setuid binary gains nothing (no_new_privs, nosuid).
		if r := backendtest.Exec(t, c, "su -c id root </dev/null 2>&1; echo rc=$?"); strings.Contains(r.Stdout, "uid=0") {
			t.Fatalf("su gave root: %s", r.Stdout)
		}
	})

	t.Run("HostFiles", func(t *testing.T) {
		marker := filepath.Join("/root", "agentbox-test-marker-"+string(sandbox.NewID()))
		if err := os.WriteFile(marker, []byte("host secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(marker)
		r := backendtest.Exec(t, c, fmt.Sprintf(
			"cat /etc/shadow 2>&1; echo rc=$?; cat %s 2>&1; echo rc=$?; ls -A /root /home 2>&1", marker))
		if strings.Contains(r.Stdout, "host secret") || strings.Contains(r.Stdout, "root:*") || strings.Contains(r.Stdout, "root:$") {
			t.Fatalf("host secrets visible: %s", r.Stdout)
		}
		if strings.Count(r.Stdout, "rc=1") != 2 {
			t.Fatalf("reading host files did not fail: %s", r.Stdout)
		}
		// The agent's socket is not in the sandbox: its code cannot call the
		// agent's API or stand in for it.
		if r := backendtest.Exec(t, c, "ls -A /run; ls /run/agentbox 2>&1"); strings.Contains(r.Stdout, "agent.sock") {
			t.Fatalf("agent socket visible inside the sandbox: %s", r.Stdout)
		}
		r = backendtest.Exec(t, c, "cat /proc/kcore 2>/dev/null | head -c 64 | wc -c; cat /etc/passwd")
		if !strings.HasPrefix(r.Stdout, "0\n") {
			t.Errorf("/proc/kcore readable: %q", r.Stdout)
		}
		if strings.Count(r.Stdout, ":x:") != 3 {
			t.Errorf("/etc/passwd is not the generated one: %q", r.Stdout)
		}
	})

	t.Run("ReadOnlyRoot", func(t *testing.T) {
		r := backendtest.Exec(t, c, "for p in /usr/agentbox-x /etc/agentbox-x /agentbox-x /.agentbox/agent; do touch $p 2>&1; done; echo done")
		if n := strings.Count(r.Stdout, "Read-only file system") + strings.Count(r.Stdout, "Permission denied"); n != 4 {
			t.Fatalf("writes to the root filesystem not all refused: %s", r.Stdout)
		}
		if r := backendtest.Exec(t, c, "touch /workspace/ok /tmp/ok /home/user/ok && echo writable"); r.Stdout != "writable\n" {
			t.Fatalf("writable dirs: %+v", r)
		}
	})

	t.Run("Network", func(t *testing.T) {
		ln, err := net.Listen("tcp", "0.0.0.0:0")
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
			if r := backendtest.Exec(t, c, script); !strings.HasPrefix(r.Stdout, "refused") {
				t.Errorf("connect to host %s:%d from a none-mode sandbox: %q %q", a, port, r.Stdout, r.Stderr)
			}
		}
	})

	t.Run("DiskCap", func(t *testing.T) {
		r := backendtest.Exec(t, c, "dd if=/dev/zero of=/workspace/big bs=1M count=200 2>&1; echo rc=$?")
		if !strings.Contains(r.Stdout, "No space left on device") {
			t.Fatalf("writing past the disk cap: %s", r.Stdout)
		}
		r = backendtest.Exec(t, c, "dd if=/dev/zero of=/tmp/big bs=1M count=50 2>&1; echo rc=$?")
		if !strings.Contains(r.Stdout, "No space left on device") {
			t.Fatalf("writing past the /tmp cap: %s", r.Stdout)
		}
		backendtest.Exec(t, c, "rm -f /workspace/big /tmp/big")
		neighbourOK(t)
	})

	t.Run("MemoryLimitOOM", func(t *testing.T) {
		before, _ := b.Stats(ctx, box.ID)
		r := backendtest.Exec(t, c, "python3 -c 'x = bytearray(400 << 20); print(len(x))'; echo rc=$?")
		if strings.Contains(r.Stdout, "419430400") {
			t.Fatalf("allocated past the memory limit: %s", r.Stdout)
		}
		after, err := b.Stats(ctx, box.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.OOMKills <= before.OOMKills {
			t.Fatalf("OOM kill not reported: before %d after %d (out %q)", before.OOMKills, after.OOMKills, r.Stdout)
		}
		if after.MemoryLimit != 96<<20 {
			t.Errorf("memory limit = %d", after.MemoryLimit)
		}
		if r := backendtest.Exec(t, c, "echo still here"); r.Stdout != "still here\n" {
			t.Fatalf("sandbox unusable after OOM: %+v", r)
		}
		neighbourOK(t)
	})

	t.Run("ForkBomb", func(t *testing.T) {
		before, _ := b.Stats(ctx, box.ID)
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := backendtest.ExecErr(bctx, c, agentclient.StartOptions{Cmd: "/bin/bash",
			Args: []string{"-c", "bomb() { bomb | bomb & }; bomb; sleep 5"}, Timeout: 3 * time.Second})
		if err != nil {
			t.Fatalf("fork bomb exec: %v", err)
		}
		after, _ := b.Stats(ctx, box.ID)
		if after.PidsLimitHits <= before.PidsLimitHits {
			t.Fatalf("pids limit not hit: before %d after %d", before.PidsLimitHits, after.PidsLimitHits)
		}
		if after.PidsLimit != 64 {
			t.Errorf("pids limit = %d", after.PidsLimit)
		}
		// The group was killed at the timeout; the sandbox recovers.
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := backendtest.ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/echo", Args: []string{"recovered"}})
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
		r, err := backendtest.ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh",
			Args: []string{"-c", "while :; do :; done"}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if r.Exit.Exited || r.Exit.ExitCode == 0 {
			t.Fatalf("spinning process not killed by timeout: %+v", r.Exit)
		}
		neighbourOK(t)
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

func TestRootSandboxIsUserNamespaced(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Root: true})
	c := backendtest.Client(t, box, "")
	r := backendtest.Exec(t, c, "id -u; cat /proc/self/uid_map; touch /workspace/f /root/f && echo writable; touch /usr/x 2>&1; grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status")
	lines := strings.Split(r.Stdout, "\n")
	if len(lines) < 3 || lines[0] != "0" {
		t.Fatalf("not root inside: %q %q", r.Stdout, r.Stderr)
	}
	if f := strings.Fields(lines[1]); len(f) != 3 || f[0] != "0" || f[1] == "0" {
		t.Fatalf("uid 0 is not mapped to an unprivileged host uid: %q", lines[1])
	}
	for _, want := range []string{"writable", "Read-only file system", "Seccomp:\t2", "NoNewPrivs:\t1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("root sandbox output lacks %q:\n%s", want, r.Stdout)
		}
	}
	// Root in the sandbox still cannot mount or create namespaces.
	r = backendtest.Exec(t, c, "mount -t tmpfs x /mnt 2>&1; unshare -U true 2>&1; echo end")
	if strings.Contains(r.Stdout, "\nend") && !strings.Contains(r.Stdout, "ermission denied") && !strings.Contains(r.Stdout, "Operation not permitted") {
		t.Fatalf("root sandbox could mount or unshare: %s", r.Stdout)
	}
	// Files it creates belong to its mapped range on the host, not to root.
	bx, _ := b.lookup(box.ID)
	st, err := os.Stat(filepath.Join(bx.paths.disk, "workspace", "f"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid == 0 {
		t.Fatalf("file created by sandbox root is owned by host root")
	}
	// The default user can be chosen per process.
	res, err := backendtest.ExecErr(ctxT(t), c, agentclient.StartOptions{Cmd: "id", Args: []string{"-un"}, User: "user"})
	if err != nil || res.Stdout != "user\n" {
		t.Fatalf("run as user in a root sandbox: %+v %v", res, err)
	}
}
