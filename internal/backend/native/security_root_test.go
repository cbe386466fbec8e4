package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/cgroups"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// rootLeftovers is what root of an ordinary sandbox leaves for the next
// user of a recycled one, if the reset let it: processes that detach
// (their own session, a double fork, one with lowered limits, one that
// ignores SIGTERM), set-uid and set-gid root programs and root-owned files
// in every writable place, an added /dev entry, owners and modes of the
// writable directories changed, IPC objects, an extended attribute.
const rootLeftovers = `set -e
setsid sleep 1001 </dev/null >/dev/null 2>&1 &
(setsid sh -c 'sleep 1002 & exit 0' </dev/null >/dev/null 2>&1 &)
setsid prlimit --nofile=16:16 --nproc=8:8 sleep 1003 </dev/null >/dev/null 2>&1 &
setsid sh -c 'trap "" TERM HUP INT; exec sleep 1004' </dev/null >/dev/null 2>&1 &
for d in /tmp /run /dev/shm /workspace /root /home/user; do
	cp /bin/sh $d/agentbox-suid && chmod 6755 $d/agentbox-suid
	mkdir $d/agentbox-sgid-dir && chmod 2777 $d/agentbox-sgid-dir
	echo root > $d/agentbox-root-file && chmod 600 $d/agentbox-root-file
done
echo x > /dev/agentbox-root-dev
chown root:root /workspace /home/user; chmod 777 /workspace /home/user /root
python3 -c 'import os; os.setxattr("/home/user", "user.left", b"root")'
ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null
sleep 0.2
ls /proc/[0-9]*/cmdline | wc -l; find /tmp /run /dev/shm /workspace /root /home/user -perm /6000 | wc -l
`

// leftoverScan lists, as root of the next user's sandbox, whatever of
// rootLeftovers is still there.
const leftoverScan = `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -o 'sleep 100[0-9]' || true; done
find /tmp /run /dev/shm /workspace /root /home/user /dev -name 'agentbox-*' -o -perm /6000 -type f
ipcs -m -q | grep -c 0x || true
python3 -c 'import os; print("xattrs", os.listxattr("/home/user"))'
stat -c '%n %u %g %a' /workspace /home/user /root
`

// TestSecurityRootOnRequestLeavesNothing: root of an ordinary sandbox
// (a request for user "root") runs as the same agent's root for every
// sandbox of a warm pool, but nothing it leaves reaches the next user of
// the recycled sandbox: after the warm reset (POOL_MAX_USES) no process of
// it runs, no set-id or root-owned file of it is anywhere, the writable
// directories have their fresh owners and modes, and the next user's
// commands run as the sandbox user without capabilities, with root again
// only on request.
func TestSecurityRootOnRequestLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	be := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	id := sandbox.NewID()
	info, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate(), AccessToken: "token-one"})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Destroy(context.Background(), id)
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "token-one")
	defer c.Close()
	fresh, err := runShAs(t, ctx, c, "root", leftoverScan)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runShAs(t, ctx, c, "root", rootLeftovers)
	if err != nil {
		t.Fatalf("root leaving things behind: %v\n%s", err, out)
	}
	if f := strings.Fields(out); len(f) != 2 || f[1] != "12" {
		t.Fatalf("root's set-id programs and directories were not all made (%q)", out)
	}
	during, err := runShAs(t, ctx, c, "root", leftoverScan)
	if err != nil || !strings.Contains(during, "sleep 1004") || !strings.Contains(during, "/root/agentbox-suid") {
		t.Fatalf("the leftovers are not there before the reset: %v\n%s", err, during)
	}

	if err := be.Recycle(ctx, id, backend.RecycleRequest{AccessToken: "token-two"}); err != nil {
		t.Fatal(err)
	}
	got, err := be.Inspect(ctx, id)
	if err != nil || got.Pid != info.Pid {
		t.Fatalf("not a warm reset: pid %d, was %d (%v)", got.Pid, info.Pid, err)
	}
	c2 := agentclient.New(agentclient.Endpoint{Network: got.Agent.Network, Address: got.Agent.Address}, "token-two")
	defer c2.Close()
	after, err := runShAs(t, ctx, c2, "root", leftoverScan)
	if err != nil {
		t.Fatal(err)
	}
	if after != fresh {
		t.Fatalf("root's leftovers reached the next user:\n%s\nfresh sandbox:\n%s", after, fresh)
	}
	// On the host: the sandbox's cgroup holds the agent and the shims it
	// started for the scan, and nothing root made is on the disk.
	bx, err := be.lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	cg := be.cgroupPaths(bx)
	dir := cg["pids"]
	if isCgroup2() {
		dir = cg[""]
	}
	pids, err := cgroups.GetAllPids(dir)
	if err != nil || !slices.Contains(pids, got.Pid) {
		t.Fatalf("the sandbox's cgroup: %v %v", pids, err)
	}
	for _, pid := range pids {
		// The exec shims: agentbox-shim (at /.agentbox/shim), or the agent
		// binary as the shim where it is not mounted.
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); pid != got.Pid && !slices.Contains([]string{"shim\n", "agent\n"}, string(comm)) {
			t.Errorf("process %d (%s) in the sandbox's cgroup after the reset", pid, strings.TrimSpace(string(comm)))
		}
	}
	for _, d := range []string{"workspace", "home", "roothome"} {
		ents, err := os.ReadDir(bx.diskPath(d))
		if err != nil || len(ents) != 0 {
			t.Errorf("disk directory %s after the reset: %v %v", d, ents, err)
		}
	}
	// The next user: uid 1000 without capabilities by default, root only
	// when asked for.
	r := backendtest.Exec(t, c2, "id -u; grep -E '^(CapEff|CapBnd):' /proc/self/status")
	if r.Stdout != "1000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n" {
		t.Fatalf("the next user's default commands: %q", r.Stdout)
	}
	if out, err := runShAs(t, ctx, c2, "root", "id -u"); err != nil || out != "0\n" {
		t.Fatalf("root on request after the reset: %q %v", out, err)
	}
}

// TestSecurityRootOnRequestHostFiles: root of an ordinary sandbox owns
// what it creates only as the sandbox's own root (a host id of the
// sandbox's range), and its CAP_DAC_OVERRIDE has no power over host files
// shown to the sandbox: a host root's 0600 file in an operator's read-only
// mount stays unreadable, and nothing there can be written.
func TestSecurityRootOnRequestHostFiles(t *testing.T) {
	testutil.RequireRoot(t)
	be := newTestBackend(t, testutil.ShortTempDir(t))
	host := testutil.ShortTempDir(t)
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(host, "secret")
	if err := os.WriteFile(secret, []byte("host root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	box := backendtest.Create(t, be, sandbox.Spec{Template: sandbox.HostTemplate(),
		Mounts: []sandbox.Mount{{Source: host, Target: "/mnt/host", ReadOnly: true}}})
	c := backendtest.Client(t, box, "")
	out, err := runShAs(t, ctxT(t), c, "root", `cat /mnt/host/secret 2>&1; echo rc=$?
echo x > /mnt/host/new 2>&1; echo rc=$?
chmod 644 /mnt/host/secret 2>&1; echo rc=$?
touch /workspace/root-made && stat -c '%u %g' /workspace/root-made`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "host root's") || strings.Count(out, "rc=") != 3 || strings.Contains(out, "rc=0") {
		t.Fatalf("root of the sandbox acted on a host file:\n%s", out)
	}
	if !strings.Contains(out, "Permission denied") {
		t.Errorf("reading host root's 0600 file was not refused by permissions (CAP_DAC_OVERRIDE applied?):\n%s", out)
	}
	if !strings.HasSuffix(out, "0 0\n") {
		t.Fatalf("root's file inside: %q", out)
	}
	bx, err := be.lookup(box.ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(bx.diskPath("workspace", "root-made"))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := sandboxUserHostIDs(t, box.Pid)
	if s := st.Sys().(*syscall.Stat_t); int(s.Uid) != uid-sandboxUID || int(s.Gid) != gid-sandboxGID || s.Uid == 0 {
		t.Errorf("root's file is owned by host %d:%d, want the range's first ids %d:%d", s.Uid, s.Gid, uid-sandboxUID, gid-sandboxGID)
	}
	if info, _ := os.Stat(secret); info.Mode().Perm() != 0o600 {
		t.Errorf("the host file's mode changed: %v", info.Mode())
	}
}
