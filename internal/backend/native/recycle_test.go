package native

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// hostPidsMax reads the pids limit of pid's cgroup from the host.
func hostPidsMax(t *testing.T, pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir := ""
		switch {
		case strings.Contains(","+parts[1]+",", ",pids,"):
			dir = "/sys/fs/cgroup/pids" + parts[2]
		case parts[0] == "0" && parts[1] == "":
			dir = "/sys/fs/cgroup" + parts[2]
		default:
			continue
		}
		if v, err := os.ReadFile(dir + "/pids.max"); err == nil {
			return strings.TrimSpace(string(v))
		}
	}
	t.Fatalf("no pids.max for pid %d:\n%s", pid, data)
	return ""
}

func runSh(t testing.TB, ctx context.Context, c *agentclient.Client, script string) (string, error) {
	return runShAs(t, ctx, c, "", script)
}

// runShAs is runSh as user ("": the sandbox's default user).
func runShAs(t testing.TB, ctx context.Context, c *agentclient.Client, user, script string) (string, error) {
	var out bytes.Buffer
	res, err := c.Run(ctx, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}, User: user}, nil, &out, &out)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return out.String(), fmt.Errorf("%q exited %d: %s", script, res.ExitCode, out.String())
	}
	return out.String(), nil
}

// TestRecycle: after Recycle the agent refuses the old token, and with the
// new one the sandbox has none of the files, processes or env of before,
// while its id, limits and disk size stay. A host-template sandbox is
// reset warm: its init keeps running.
func TestRecycle(t *testing.T) {
	testutil.RequireRoot(t)
	be := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	id := sandbox.NewID()
	info, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate(), AccessToken: "token-one",
		Resources: sandbox.Resources{MemoryBytes: 96 << 20, PIDs: 77}})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Destroy(context.Background(), id)
	old := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "token-one")
	defer old.Close()
	if err := old.SetEnv(ctx, map[string]string{"OLD_SECRET": "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := runSh(t, ctx, old, `echo s1 > /workspace/f; echo s1 > "$HOME/f"; echo s1 > /tmp/f; (setsid sleep 4242 >/dev/null 2>&1 &); echo $OLD_SECRET`); err != nil {
		t.Fatal(err)
	}

	if err := be.Recycle(ctx, id, backend.RecycleRequest{}); err == nil {
		t.Fatal("recycle without a new token accepted")
	}
	if err := be.Recycle(ctx, id, backend.RecycleRequest{AccessToken: "token-two"}); err != nil {
		t.Fatal(err)
	}
	if _, err := runSh(t, ctx, old, "true"); err == nil {
		t.Fatal("the agent still accepts the previous token")
	}
	got, err := be.Inspect(ctx, id)
	if err != nil || got.State != sandbox.StateRunning || got.Spec.Resources.PIDs != 77 || got.Spec.Resources.MemoryBytes != 96<<20 {
		t.Fatalf("after recycle: %+v %v", got, err)
	}
	c := agentclient.New(agentclient.Endpoint{Network: got.Agent.Network, Address: got.Agent.Address}, "token-two")
	defer c.Close()
	out, err := runSh(t, ctx, c, `ls -A /workspace /tmp "$HOME"; echo "env:$OLD_SECRET"; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "f\n") || strings.Contains(out, "s1") || strings.Contains(out, "4242") {
		t.Fatalf("the previous use left traces:\n%s", out)
	}
	if got.Pid != info.Pid {
		t.Fatalf("a host-template sandbox was not warm reset: init pid %d (was %d)", got.Pid, info.Pid)
	}
	if max := hostPidsMax(t, got.Pid); max != "77" {
		t.Fatalf("pids limit after recycle: %q", max)
	}
}

// BenchmarkRecycle times Backend.Recycle of a used sandbox (a file written,
// a background process) next to a Create+Destroy of the same spec in the
// same run, and logs the recycle's phase medians.
func BenchmarkRecycle(b *testing.B) {
	be := newTestBackend(b, testutil.ShortTempDir(b))
	ctx := context.Background()
	spec := sandbox.Spec{ID: sandbox.NewID(), Template: sandbox.HostTemplate(), AccessToken: "t0"}
	info, err := be.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Destroy(ctx, spec.ID)
	phases := map[string][]time.Duration{}
	var order []string
	SetPhaseHook(func(s PhaseSample) {
		if s.Op != "recycle" {
			return
		}
		if _, ok := phases[s.Phase]; !ok {
			order = append(order, s.Phase)
		}
		phases[s.Phase] = append(phases[s.Phase], s.Wall)
	})
	defer SetPhaseHook(nil)
	var recycles, cycles []time.Duration
	// A warm reset keeps the agent's process: what each generation leaves
	// behind would show as growth here.
	agentStatus := func() string {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", info.Pid))
		var keep []string
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "Threads:") {
				keep = append(keep, strings.Join(strings.Fields(l), " "))
			}
		}
		return strings.Join(keep, ", ")
	}
	statusBefore := agentStatus()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok := fmt.Sprintf("t%d", i+1)
		c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, fmt.Sprintf("t%d", i))
		if _, err := runSh(b, ctx, c, `echo x > /workspace/f; (setsid sleep 1000 >/dev/null 2>&1 &)`); err != nil {
			b.Fatal(err)
		}
		c.Close()
		start := time.Now()
		if err := be.Recycle(ctx, spec.ID, backend.RecycleRequest{AccessToken: tok}); err != nil {
			b.Fatal(err)
		}
		recycles = append(recycles, time.Since(start))

		id := sandbox.NewID()
		start = time.Now()
		if _, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate()}); err != nil {
			b.Fatal(err)
		}
		if err := be.Destroy(ctx, id); err != nil {
			b.Fatal(err)
		}
		cycles = append(cycles, time.Since(start))
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(recycles), "recycle-p50-ms")
	b.ReportMetric(med(cycles), "create+destroy-p50-ms")
	var t strings.Builder
	t.WriteString("\n| recycle phase | wall ms (median) |\n|---|---:|\n")
	for _, p := range order {
		fmt.Fprintf(&t, "| %s | %.2f |\n", p, med(phases[p]))
	}
	fmt.Fprintf(&t, "| **recycle total** (n=%d) | **%.2f** |\n| create + destroy, same run | %.2f |\n", len(recycles), med(recycles), med(cycles))
	if got, _ := be.Inspect(ctx, spec.ID); got.Pid == info.Pid {
		fmt.Fprintf(&t, "\nagent (same process, warm resets): before %s; after %d recycles %s\n", statusBefore, len(recycles), agentStatus())
	}
	fmt.Println(t.String())
}

// TestRecycleImageTemplate: a recycled image sandbox has the image's root
// filesystem again (a file root wrote gone, one root deleted back), on a
// fresh writable layer.
func TestRecycleImageTemplate(t *testing.T) {
	testutil.RequireRoot(t)
	be := newTestBackend(t, testutil.ShortTempDir(t))
	if err := be.idmappedOverlaySupported(); err != nil {
		t.Fatalf("this kernel (6.x) should support idmapped overlay layers: %v", err)
	}
	tmpl := imageTemplate(imageLayers(t), sandbox.ImageConfig{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}})
	a := backendtest.Create(t, be, sandbox.Spec{Template: tmpl, WritableRoot: true, Root: true, AccessToken: "img-one"})
	ca := backendtest.Client(t, a, "img-one")
	if r := backendtest.Exec(t, ca, `echo mine > /etc/written && rm /etc/image-only && echo x > /opt/data/new && echo ok`); r.Stdout != "ok\n" {
		t.Fatalf("writes: %+v", r)
	}
	if err := be.Recycle(ctxT(t), a.ID, backend.RecycleRequest{AccessToken: "img-two"}); err != nil {
		t.Fatal(err)
	}
	cb := backendtest.Client(t, a, "img-two")
	r := backendtest.Exec(t, cb, `test -e /etc/written && echo leaked; cat /etc/image-only /opt/data/new; id -u`)
	if r.Stdout != "from the lower layer\nlayer 2\n0\n" {
		t.Fatalf("recycled image sandbox = %+v", r)
	}
}

// TestRecycleWarmLeavesNothing goes after what a warm reset (which keeps
// the sandbox's init and namespaces) must take away besides files and
// processes: System V and POSIX IPC objects, TCP sockets the kernel keeps
// after their process died (TIME_WAIT) and the TCP metrics it keeps of
// their peers, additions to /dev, /run and
// /dev/shm, and the owner, mode and extended attributes of the disk's
// directories; a link to / in the workspace is removed, not followed.
// Then a sandbox whose /dev was tampered with (its root replaced a link)
// falls back to the full recycle, which boots it again.
func TestRecycleWarmLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	be := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	id := sandbox.NewID()
	info, err := be.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate(), AccessToken: "token-one", Root: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Destroy(context.Background(), id)
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "token-one")
	defer c.Close()
	before, err := runSh(t, ctx, c, `stat -c '%a %u %g' /workspace /root`)
	if err != nil {
		t.Fatal(err)
	}
	use := `set -e
ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null; ipcmk -S 2 >/dev/null
python3 - <<'PY'
import ctypes, os, socket
rt = ctypes.CDLL("librt.so.1", use_errno=True)
if rt.mq_open(b"/secretq", os.O_CREAT | os.O_RDWR, 0o600, None) < 0:
    raise SystemExit("mq_open: %d" % ctypes.get_errno())
srv = socket.socket(); srv.bind(("127.0.0.1", 4777)); srv.listen()
cl = socket.create_connection(("127.0.0.1", 4777)); conn, _ = srv.accept()
cl.close(); conn.close(); srv.close()
os.setxattr("/workspace", "user.secret", b"s1")
import time
big = b"x" * (64 << 20)
end = time.time() + 0.4
while time.time() < end:
    pass
PY
chmod 700 /workspace; chmod 755 /root
ln -s / /workspace/hostroot; mkdir -p /workspace/a/b/c; echo s1 > /workspace/a/b/c/f
mkdir /workspace/many; (cd /workspace/many && seq 1500 | xargs touch) # more than one listing batch
echo s1 > /run/s1; echo s1 > /dev/shm/s1; echo s1 > /dev/s1
ipcs | grep -c 0x || true; grep -c ':12A9' /proc/net/tcp; ip tcp_metrics show`
	if out, err := runSh(t, ctx, c, use); err != nil || !strings.Contains(out, "1\n") || !strings.Contains(out, "127.0.0.1 age") {
		t.Fatalf("using the sandbox: %v\n%s", err, out)
	}
	// The agent's control token, which opens its reset routes, is out of
	// reach even of the sandbox's root.
	if out, _ := runSh(t, ctx, c, `cat /proc/1/environ; tr '\0' '\n' < /proc/self/environ; env`); strings.Contains(out, "AGENTBOX_CONTROL") {
		t.Fatalf("the control token is readable in the sandbox:\n%s", out)
	}
	used, err := be.Stats(ctx, id)
	if err != nil || used.CPUSeconds < 0.3 || used.MemoryMaxBytes < 64<<20 {
		t.Fatalf("the previous user's usage did not show: %+v %v", used, err)
	}
	if err := be.Recycle(ctx, id, backend.RecycleRequest{AccessToken: "token-two"}); err != nil {
		t.Fatal(err)
	}
	got, err := be.Inspect(ctx, id)
	if err != nil || got.Pid != info.Pid {
		t.Fatalf("not a warm reset: pid %d, was %d (%v)", got.Pid, info.Pid, err)
	}
	// Usage starts again (the peak where cgroup v1 can reset it).
	fresh, err := be.Stats(ctx, id)
	if err != nil || fresh.CPUSeconds > 0.2 || !isCgroup2() && fresh.MemoryMaxBytes >= 64<<20 {
		t.Fatalf("the previous user's usage shows after the warm reset: %+v %v", fresh, err)
	}
	c2 := agentclient.New(agentclient.Endpoint{Network: got.Agent.Network, Address: got.Agent.Address}, "token-two")
	defer c2.Close()
	out, err := runSh(t, ctx, c2, `ipcs; python3 -c '
import ctypes, os
rt = ctypes.CDLL("librt.so.1", use_errno=True)
print("mq", rt.mq_open(b"/secretq", os.O_RDWR))
print("xattr", os.listxattr("/workspace"))'
cat /proc/net/tcp /proc/net/tcp6; ip tcp_metrics show; ls -A /workspace /run /dev/shm; ls /dev; find /workspace /root -mindepth 1 | head; stat -c '%a %u %g' /workspace /root`)
	if err != nil {
		t.Fatal(err)
	}
	for _, trace := range []string{"0x", "mq 3", "user.secret", ":12A9", "127.0.0.1 age", "hostroot", "s1", "many"} {
		if strings.Contains(out, trace) {
			t.Fatalf("%q survived the warm reset:\n%s", trace, out)
		}
	}
	if !strings.Contains(out, "mq -1") || !strings.HasSuffix(out, before) {
		t.Fatalf("after the warm reset (want owners and modes %q):\n%s", before, out)
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Fatalf("the host lost /bin/sh: %v", err)
	}

	// Tampered: the full recycle takes over.
	if out, err := runSh(t, ctx, c2, `ln -sfn /tmp /dev/fd && ls -l /dev/fd`); err != nil || !strings.Contains(out, "/tmp") {
		t.Fatalf("replace /dev/fd: %v\n%s", err, out)
	}
	if err := be.Recycle(ctx, id, backend.RecycleRequest{AccessToken: "token-three"}); err != nil {
		t.Fatal(err)
	}
	got, err = be.Inspect(ctx, id)
	if err != nil || got.Pid == info.Pid || got.Pid == 0 {
		t.Fatalf("a tampered sandbox was not booted again: pid %d, was %d (%v)", got.Pid, info.Pid, err)
	}
	c3 := agentclient.New(agentclient.Endpoint{Network: got.Agent.Network, Address: got.Agent.Address}, "token-three")
	defer c3.Close()
	if out, err := runSh(t, ctx, c3, `readlink /dev/fd`); err != nil || strings.Contains(out, "/tmp") {
		t.Fatalf("/dev/fd after the full recycle: %v %q", err, out)
	}
}
