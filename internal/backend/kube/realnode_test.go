package kube

import (
	"context"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/kubetest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// Images the real node runs, imported into its containerd (never pulled).
const (
	realAgentImage    = "kubetest.local/agentbox-agent:test"
	realTemplateImage = "kubetest.local/abtest:1"
)

// realNodeEnv is the control plane with one real node (kubelet,
// containerd, runc, bridge CNI) holding the agent's image — what
// deploy/kubernetes/Dockerfile.agent builds: /agentbox-agent on scratch —
// and a template image of the test rootfs.
type realNodeEnv struct {
	c    *kubetest.Cluster
	node *kubetest.Node
}

func startRealNodeEnv(t *testing.T) *realNodeEnv {
	t.Helper()
	testutil.RequireRoot(t)
	c := kubetest.Start(t)
	n := kubetest.StartNode(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bindClaimsAt(t, c.Namespace, mustClient(t, c), t.TempDir())
	agentRoot := t.TempDir()
	copyInto(t, agentRoot, testutil.AgentBinary(t), "/agentbox-agent")
	if err := n.ImportImage(ctx, realAgentImage, agentRoot, kubetest.ImageConfig{Entrypoint: []string{"/agentbox-agent"}}); err != nil {
		t.Fatalf("import the agent image: %v", err)
	}
	root := testRootfs(t)
	// bash for the code context, tail to fill memory, stty and tty for
	// the terminal.
	for _, bin := range []string{"/bin/bash", "/usr/bin/tail", "/bin/stty", "/usr/bin/tty"} {
		copyWithLibs(t, root, bin)
	}
	if err := n.ImportImage(ctx, realTemplateImage, root, kubetest.ImageConfig{}); err != nil {
		t.Fatalf("import the template image: %v", err)
	}
	return &realNodeEnv{c: c, node: n}
}

func (e *realNodeEnv) backend(t *testing.T, instance string) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := New(ctx, Config{REST: e.c.RESTConfig, Namespace: e.c.Namespace, Instance: instance,
		AgentImage: realAgentImage, ImagePullPolicy: corev1.PullNever, ReadyTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var realTemplate = sandbox.Template{Ref: TemplatePrefix + realTemplateImage, Kind: TemplateKind}

// TestKubeRealNode: the kube backend's sandboxes as real pods — kubelet
// and containerd run them, the agent answers on the pod IP of the node's
// bridge network. Basics: exec, files and a code context work through it;
// the kubelet's memory limit OOM-kills what goes past it; destroy leaves
// no object. Then the backend conformance suite (stop/start keeping the
// workspace claim, recovery by a restarted daemon, concurrency), a
// terminal, and a warm pool's hit. The node leaves nothing on the machine
// (StartNode checks).
func TestKubeRealNode(t *testing.T) {
	e := startRealNodeEnv(t)
	t.Run("Basics", func(t *testing.T) { testRealNodeBasics(t, e) })
	t.Run("Conformance", func(t *testing.T) {
		backendtest.Run(t, backendtest.Harness{
			New:         func(t *testing.T, dir string) backend.Backend { return tokenBackend{e.backend(t, instanceOf(dir))} },
			StateDir:    func(t *testing.T) string { return t.TempDir() },
			Template:    realTemplate,
			Abandon:     func(b backend.Backend) { b.(tokenBackend).Abandon() },
			AccessToken: suiteToken,
		})
	})
	t.Run("PTY", func(t *testing.T) { testRealNodePTY(t, e) })
	t.Run("PoolHit", func(t *testing.T) { testRealNodePoolHit(t, e) })
}

func testRealNodeBasics(t *testing.T, e *realNodeEnv) {
	ctx := ctxFor(t)
	b := e.backend(t, "real")
	spec := sandbox.Spec{ID: sandbox.NewID(), Template: realTemplate, AccessToken: "real-token-0123456789abcdef",
		Env: map[string]string{"GREETING": "hello"}, Resources: sandbox.Resources{MemoryBytes: 128 << 20}}
	start := time.Now()
	info, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v\nkubelet:\n%s", err, e.node.Log("kubelet", 20))
	}
	t.Logf("create on the real node: %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { b.Destroy(context.Background(), spec.ID) })
	if ap, err := netip.ParseAddrPort(info.Agent.Address); err != nil || !e.node.Subnet.Contains(ap.Addr()) {
		t.Fatalf("agent at %s, want the pod IP on the node's subnet %s", info.Agent.Address, e.node.Subnet)
	}
	anon := agentclient.New(agentclient.Endpoint{Network: "tcp", Address: info.Agent.Address}, "")
	defer anon.Close()
	if _, err := anon.Envs(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
		t.Fatalf("agent without a token: %v, want unauthenticated", err)
	}
	c := backendtest.Client(t, info, spec.AccessToken)
	if r := backendtest.Exec(t, c, `echo "$GREETING"; id -u`); r.Stdout != "hello\n1000\n" {
		t.Fatalf("exec = %+v", r)
	}
	if _, err := c.Upload(ctx, "/workspace/data.txt", "", strings.NewReader("file content\n")); err != nil {
		t.Fatalf("upload: %v", err)
	}
	rc, _, err := c.Download(ctx, "/workspace/data.txt", "")
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "file content\n" {
		t.Fatalf("downloaded %q", got)
	}

	cc, err := c.CreateContext(ctx, "bash", "/workspace", "")
	if err != nil {
		t.Fatalf("bash code context: %v", err)
	}
	if _, err := c.RunCode(ctx, agentclient.ExecuteRequest{ContextID: cc.ID, Code: "x=41"}); err != nil {
		t.Fatal(err)
	}
	x, err := c.RunCode(ctx, agentclient.ExecuteRequest{ContextID: cc.ID, Code: "echo $((x+1)); cat data.txt"})
	if err != nil || x.Error != nil || strings.Join(x.Stdout, "") != "42\nfile content\n" {
		t.Fatalf("code context kept no state: %+v, %v", x, err)
	}

	// The kubelet's limit is the container's memory cgroup (v1 or v2).
	limit := backendtest.Exec(t, c, `cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max`)
	if strings.TrimSpace(limit.Stdout) != strconv.Itoa(128<<20) {
		t.Fatalf("memory limit in the pod = %q, want %d", limit.Stdout, 128<<20)
	}
	// tail holds a line without end in memory: past the limit the OOM
	// killer takes it (the agent's children go first), the agent lives.
	r, err := backendtest.ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c",
		`head -c 400000000 /dev/zero | tail >/dev/null; echo "status $?"`}, Timeout: 2 * time.Minute})
	if err != nil || r.Stdout != "status 137\n" {
		t.Fatalf("past the memory limit: %+v, %v; want tail killed (137)", r, err)
	}
	ev := backendtest.Exec(t, c, `cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events`)
	if oomKills(ev.Stdout) < 1 {
		t.Fatalf("the cgroup counts no OOM kill: %q", ev.Stdout)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatalf("the agent died with its child: %v", err)
	}

	if err := b.Destroy(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Minute, "the sandbox's objects and pod are gone", func() (bool, error) {
		objs, err := objectsOf(ctx, b.c, b.cfg.Namespace, spec.ID)
		if err != nil || len(objs) > 0 {
			return false, err
		}
		var pods corev1.PodList
		err = b.c.List(ctx, &pods, client.InNamespace(b.cfg.Namespace))
		return err == nil && len(pods.Items) == 0, err
	})
}

// testRealNodePTY: a process in a terminal of the size asked, resized
// while it runs, its input and output through the terminal.
func testRealNodePTY(t *testing.T, e *realNodeEnv) {
	ctx := ctxFor(t)
	b := e.backend(t, "pty")
	spec := sandbox.Spec{ID: sandbox.NewID(), Template: realTemplate, AccessToken: "pty-token-0123456789abcdef"}
	info, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { b.Destroy(context.Background(), spec.ID) })
	c := backendtest.Client(t, info, spec.AccessToken)
	p, err := c.Start(ctx, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", "stty size; read x; stty size; echo got $x; tty"},
		PTY: &agentclient.PTYSize{Cols: 100, Rows: 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out strings.Builder
	readUntil := func(s string) {
		t.Helper()
		for !strings.Contains(out.String(), s) {
			ev, err := p.Next()
			if err != nil || ev.Kind == agentclient.EventEnd {
				t.Fatalf("waiting for %q in the terminal's %q: %+v, %v", s, out.String(), ev.End, err)
			}
			if ev.Kind != agentclient.EventPTY {
				t.Fatalf("event kind %v from a terminal", ev.Kind)
			}
			out.Write(ev.Data)
		}
	}
	readUntil("30 100")
	if err := p.Resize(ctx, 120, 40); err != nil {
		t.Fatal(err)
	}
	if err := p.SendStdin(ctx, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	readUntil("40 120")
	readUntil("got hello")
	readUntil("/dev/pts/")
	if res, err := p.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("terminal process ended %+v, %v", res, err)
	}
}

// testRealNodePoolHit: a SandboxWarmPool of one on the real node; a
// create from it claims the warm pod, which takes the sandbox's own env
// and token (the pool's no longer opens it); a restarted daemon recovers
// it by its labels; destroy removes it and its claim.
func testRealNodePoolHit(t *testing.T, e *realNodeEnv) {
	ctx := ctxFor(t)
	b := e.backend(t, "pool")
	if err := b.EnsurePool(ctx, "abtest", sandbox.Spec{Template: realTemplate}, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.DeletePool(context.Background(), "abtest") })
	waitPoolReady(t, b, "abtest", 1)
	spec := sandbox.Spec{ID: sandbox.NewID(), AccessToken: "own-token-0123456789abcdef", Env: map[string]string{"WHO": "dave"}, Labels: map[string]string{"owner": "dave"}}
	start := time.Now()
	info, err := b.CreateFromPool(ctx, "abtest", spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Destroy(context.Background(), spec.ID) })
	if name := b.sandboxName(spec.ID); !strings.HasPrefix(name, "abpool-abtest") {
		t.Errorf("the claimed Sandbox is %q, want one of the warm pool's", name)
	}
	c := backendtest.Client(t, info, spec.AccessToken)
	if r := backendtest.Exec(t, c, `echo "$WHO"; id -u`); r.Stdout != "dave\n1000\n" {
		t.Fatalf("exec in the pool's sandbox = %+v", r)
	}
	t.Logf("pool hit to first exec on the real node: %s", time.Since(start).Round(time.Millisecond))
	var pool corev1.Secret
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: poolSecretName("abtest")}, &pool); err != nil {
		t.Fatal(err)
	}
	pc := agentclient.New(agentclient.Endpoint{Network: "tcp", Address: info.Agent.Address}, string(pool.Data[secretToken]))
	defer pc.Close()
	if _, err := pc.Envs(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
		t.Fatalf("the pool's token on a handed-out sandbox: %v, want unauthenticated", err)
	}
	b2 := e.backend(t, "pool")
	infos, err := b2.Recover(ctx)
	if err != nil || len(infos) != 1 || infos[0].ID != spec.ID || infos[0].Spec.Labels["owner"] != "dave" || infos[0].State != sandbox.StateRunning {
		t.Fatalf("recover = %+v, %v", infos, err)
	}
	if err := b2.Destroy(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Minute, "the claim and the sandbox are gone", func() (bool, error) {
		objs, err := objectsOf(ctx, b.c, b.cfg.Namespace, spec.ID)
		return err == nil && len(objs) == 0, err
	})
}

// copyWithLibs copies a host binary and the libraries ldd names into root.
func copyWithLibs(t *testing.T, root, bin string) {
	t.Helper()
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	copyInto(t, root, real, bin)
	copyLibs(t, root, real)
}

// copyLibs copies the libraries ldd names for a host binary into root.
func copyLibs(t *testing.T, root, real string) {
	t.Helper()
	out, err := exec.Command("ldd", real).Output()
	if err != nil {
		return // static
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			if lib, err := filepath.EvalSymlinks(f); err == nil {
				if _, err := os.Stat(filepath.Join(root, f)); err != nil {
					copyInto(t, root, lib, f)
				}
			}
		}
	}
}

// oomKills reads the "oom_kill N" line of memory.oom_control (v1) or
// memory.events (v2); -1 without one.
func oomKills(s string) int {
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

// TestKubeRealNodeBench is TestKubeBench on the real node: cold create
// (now a real pod: sandbox, CNI, init container, agent) and pool hit to
// first exec; run it in the same go test as TestKubeBench for the
// comparison in docs/benchmarks.md. AGENTBOX_KUBE_BENCH=N rounds.
func TestKubeRealNodeBench(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("AGENTBOX_KUBE_BENCH"))
	if rounds <= 0 {
		t.Skip("set AGENTBOX_KUBE_BENCH=N to measure")
	}
	e := startRealNodeEnv(t)
	b := e.backend(t, "bench")
	cold, hit, execs := benchKube(t, b, realTemplate, rounds)
	t.Logf("\n| create to first exec, real node (%d rounds) | median |\n|---|---|\n| kube backend, cold (Sandbox → scheduler → kubelet/containerd) | %s |\n| kube backend, pool hit (SandboxClaim) | %s |",
		rounds, benchMedian(cold), benchMedian(hit))
	t.Logf("\n| exec `true` round trip, real node (%d in a row) | p50 | p99 |\n|---|---|---|\n| kube backend (agent on the pod IP, bridge CNI) | %s |", execRounds, benchP50P99(execs))
}
