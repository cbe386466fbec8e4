package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/kubenode"
	"github.com/agentbox/agentbox/internal/kubetest"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/testutil"
)

// These tests run the kube backend end to end: the real control plane
// (kubetest), kube-scheduler placing the agent-sandbox controller's pods
// on an agentbox node (internal/kubenode) that runs them through the
// native backend, and the daemon side reaching each pod's agent on its
// pod IP with the sandbox's token.

func TestMain(m *testing.M) {
	native.SealSelf()
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// testImage is the template of the node's store every test pod runs.
const testImage = "abtest"

var testTemplate = sandbox.Template{Ref: TemplatePrefix + testImage, Kind: TemplateKind}

// nodeEnv is a control plane with one agentbox node on it.
type nodeEnv struct {
	c      *kubetest.Cluster
	native *native.Backend
	net    *netpolicy.Manager
	store  *template.Store
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startNodeEnv(t *testing.T) *nodeEnv {
	t.Helper()
	testutil.RequireRoot(t)
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bindClaims(t, c.Namespace, mustClient(t, c))

	suffix := make([]byte, 3)
	rand.Read(suffix)
	dir := testutil.ShortTempDir(t)
	subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 190 + suffix[0]%40, suffix[1], 0}), 24)
	nm, err := netpolicy.New(ctx, netpolicy.Config{
		Bridge: "abkb" + hex.EncodeToString(suffix), Subnet: subnet,
		Upstream: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")},
		StateDir: filepath.Join(dir, "net"), NetnsDir: filepath.Join(dir, "netns"),
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatalf("netpolicy: %v", err)
	}
	t.Cleanup(func() {
		if err := nm.Close(true); err != nil {
			t.Errorf("close netpolicy: %v", err)
		}
	})
	nb, err := native.New(native.Config{Root: filepath.Join(dir, "n"), AgentPath: testutil.AgentBinary(t), Network: nm, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	t.Cleanup(func() {
		if err := nb.Close(); err != nil {
			t.Errorf("close native backend: %v", err)
		}
	})
	store, err := template.Open(ctx, filepath.Join(dir, "t"), template.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("template store: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.Import(ctx, testRootfs(t), testImage, nil); err != nil {
		t.Fatalf("import the test image: %v", err)
	}
	cert, key, err := c.ServingCert("kubelet-agentbox-kube-test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n, err := kubenode.Start(ctx, kubenode.Config{
		NodeName: "agentbox-kube-test", REST: c.RESTConfig, Backend: nb, Network: nm, Templates: store,
		Defaults: native.DefaultResources, VolumeDir: filepath.Join(dir, "vol"), LogDir: filepath.Join(dir, "logs"),
		Address: "127.0.0.1", Port: port, TLSCertFile: cert, TLSKeyFile: key, ClientCAFile: c.CAFile,
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatalf("start the agentbox node: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := n.Stop(sctx); err != nil {
			t.Errorf("stop node: %v", err)
		}
	})
	return &nodeEnv{c: c, native: nb, net: nm, store: store}
}

func mustClient(t *testing.T, c *kubetest.Cluster) client.Client {
	t.Helper()
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// waitPoolReady waits until warm pool name has n ready sandboxes.
func waitPoolReady(t *testing.T, b *Backend, name string, n int32) {
	t.Helper()
	within(t, 2*time.Minute, "the warm pool is ready", func() (bool, error) {
		var wp extv1.SandboxWarmPool
		err := b.c.Get(context.Background(), client.ObjectKey{Namespace: b.cfg.Namespace, Name: poolObjectName(name)}, &wp)
		return err == nil && wp.Status.ReadyReplicas >= n, fmt.Errorf("ready %d (%v)", wp.Status.ReadyReplicas, err)
	})
}

// testRootfs is a tiny image of the host's binaries the tests need (sh,
// coreutils' few, id, hostname) and their libraries.
func testRootfs(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, bin := range []string{"/bin/sh", "/bin/cat", "/bin/sleep", "/bin/ls", "/bin/echo", "/usr/bin/id", "/bin/hostname", "/bin/mkdir", "/bin/rm", "/usr/bin/head", "/usr/bin/wc"} {
		real, err := filepath.EvalSymlinks(bin)
		if err != nil {
			t.Fatal(err)
		}
		copyInto(t, root, real, bin)
		out, err := exec.Command("ldd", real).Output()
		if err != nil {
			continue // static
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					lib, err := filepath.EvalSymlinks(f)
					if err != nil {
						t.Fatal(err)
					}
					copyInto(t, root, lib, f)
				}
			}
		}
	}
	for _, d := range []string{"tmp", "workspace", "home/user", "etc", "proc", "dev", "sys", "opt/agentbox", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func copyInto(t *testing.T, root, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(root, dst)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// suiteToken is the access token of every sandbox of the conformance
// suite: the node never serves an agent on the pod IP without one.
const suiteToken = "kube-conformance-token-0123456789"

// tokenBackend gives every sandbox created without a token the suite's.
type tokenBackend struct{ *Backend }

func (b tokenBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if spec.AccessToken == "" {
		spec.AccessToken = suiteToken
	}
	return b.Backend.Create(ctx, spec)
}

// instanceOf maps a conformance state dir to a K8S_INSTANCE: a second
// backend over the same dir is the same daemon restarted.
func instanceOf(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return "t" + hex.EncodeToString(sum[:6])
}

// TestKubeNode: the backend conformance suite and the lifecycle against
// the kube backend, with an agentbox node running the pods.
func TestKubeNode(t *testing.T) {
	e := startNodeEnv(t)
	newBackend := func(t *testing.T, instance string) *Backend {
		return newClusterBackend(t, e.c, instance, 2*time.Minute)
	}

	t.Run("Conformance", func(t *testing.T) {
		backendtest.Run(t, backendtest.Harness{
			New:         func(t *testing.T, dir string) backend.Backend { return tokenBackend{newBackend(t, instanceOf(dir))} },
			StateDir:    func(t *testing.T) string { return t.TempDir() },
			Template:    testTemplate,
			Abandon:     func(b backend.Backend) { b.(tokenBackend).Abandon() },
			AccessToken: suiteToken,
		})
	})

	t.Run("Lifecycle", func(t *testing.T) {
		ctx := ctxFor(t)
		b := newBackend(t, "life")
		spec := sandbox.Spec{ID: sandbox.NewID(), Template: testTemplate, AccessToken: "life-token-0123456789abcdef",
			Env: map[string]string{"GREETING": "hello"}, Labels: map[string]string{"owner": "carol"}}
		info, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Destroy(context.Background(), spec.ID) })
		if info.Agent.Network != "tcp" || !strings.HasSuffix(info.Agent.Address, ":49983") {
			t.Fatalf("agent endpoint = %+v, want the pod IP's port 49983", info.Agent)
		}
		// The token is required on the pod IP.
		anon := agentclient.New(agentclient.Endpoint{Network: "tcp", Address: info.Agent.Address}, "")
		defer anon.Close()
		if _, err := anon.Envs(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
			t.Fatalf("agent without a token: %v, want unauthenticated", err)
		}
		c := backendtest.Client(t, info, spec.AccessToken)
		if r := backendtest.Exec(t, c, `echo "$GREETING"; id -u`); r.Stdout != "hello\n1000\n" {
			t.Fatalf("exec = %+v", r)
		}
		// Files: upload, then read back through exec and download.
		if _, err := c.Upload(ctx, "/workspace/data.txt", "", strings.NewReader("file content\n")); err != nil {
			t.Fatalf("upload: %v", err)
		}
		if r := backendtest.Exec(t, c, "cat /workspace/data.txt"); r.Stdout != "file content\n" {
			t.Fatalf("uploaded file = %q", r.Stdout)
		}
		rc, _, err := c.Download(ctx, "/workspace/data.txt", "")
		if err != nil {
			t.Fatalf("download: %v", err)
		}
		var buf bytes.Buffer
		io.Copy(&buf, rc)
		rc.Close()
		if buf.String() != "file content\n" {
			t.Fatalf("downloaded %q", buf.String())
		}
		// Stop/start keeps the workspace (the claim's directory on the node).
		if err := b.Stop(ctx, spec.ID); err != nil {
			t.Fatal(err)
		}
		if info, err = b.Start(ctx, spec.ID); err != nil {
			t.Fatal(err)
		}
		c = backendtest.Client(t, info, spec.AccessToken)
		if r := backendtest.Exec(t, c, "cat /workspace/data.txt"); r.Stdout != "file content\n" {
			t.Fatalf("workspace after stop/start = %q", r.Stdout)
		}
		// A new backend (a restarted daemon) recovers it, running.
		b2 := newBackend(t, "life")
		infos, err := b2.Recover(ctx)
		if err != nil || len(infos) != 1 || infos[0].State != sandbox.StateRunning || infos[0].Spec.Labels["owner"] != "carol" {
			t.Fatalf("recover = %+v, %v", infos, err)
		}
		if r := backendtest.Exec(t, backendtest.Client(t, infos[0], spec.AccessToken), "cat /workspace/data.txt"); r.Stdout != "file content\n" {
			t.Fatalf("recovered sandbox's file = %q", r.Stdout)
		}
		if err := b2.Destroy(ctx, spec.ID); err != nil {
			t.Fatal(err)
		}
		if err := c.Health(ctx); err == nil {
			t.Fatal("agent answers after destroy")
		}
	})

	t.Run("PoolHit", func(t *testing.T) {
		ctx := ctxFor(t)
		b := newBackend(t, "pool")
		if err := b.EnsurePool(ctx, "abtest", sandbox.Spec{Template: testTemplate}, 1); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.DeletePool(context.Background(), "abtest") })
		waitPoolReady(t, b, "abtest", 1)
		spec := sandbox.Spec{ID: sandbox.NewID(), AccessToken: "own-token-0123456789abcdef", Env: map[string]string{"WHO": "dave"}, Labels: map[string]string{"owner": "dave"}}
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
		// The pool's token no longer opens it.
		var pool corev1.Secret
		if err := b.c.Get(ctx, client.ObjectKey{Namespace: b.cfg.Namespace, Name: poolSecretName("abtest")}, &pool); err != nil {
			t.Fatal(err)
		}
		pc := agentclient.New(agentclient.Endpoint{Network: "tcp", Address: info.Agent.Address}, string(pool.Data[secretToken]))
		defer pc.Close()
		if _, err := pc.Envs(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
			t.Fatalf("the pool's token on a handed-out sandbox: %v, want unauthenticated", err)
		}
		// Recover finds it by its labels; destroy removes it and its claim.
		b2 := newBackend(t, "pool")
		infos, err := b2.Recover(ctx)
		if err != nil || len(infos) != 1 || infos[0].ID != spec.ID || infos[0].Spec.Labels["owner"] != "dave" || infos[0].State != sandbox.StateRunning {
			t.Fatalf("recover = %+v, %v", infos, err)
		}
		if err := b2.Destroy(ctx, spec.ID); err != nil {
			t.Fatal(err)
		}
		within(t, time.Minute, "the claim and the sandbox are gone", func() (bool, error) {
			objs, err := objectsOf(ctx, b.c, b.cfg.Namespace, spec.ID)
			return err == nil && len(objs) == 0, err
		})
	})
}

// TestKubeBench measures create-to-first-exec on the kube backend (cold,
// and a pool hit through a SandboxClaim) next to the native backend the
// node runs the pods with, same template, same machine, same run; the
// numbers go to docs/benchmarks.md. Run with AGENTBOX_KUBE_BENCH=N (N
// rounds); it is not part of make test.
func TestKubeBench(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("AGENTBOX_KUBE_BENCH"))
	if rounds <= 0 {
		t.Skip("set AGENTBOX_KUBE_BENCH=N to measure")
	}
	e := startNodeEnv(t)
	ctx := ctxFor(t)
	b := newClusterBackend(t, e.c, "bench", 2*time.Minute)
	tmpl, err := e.store.Resolve(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	cold, hit, kubeExec := benchKube(t, b, testTemplate, rounds)
	const token = "bench-token-0123456789abcdef"
	firstExec := func(info sandbox.Info, token string) { benchFirstExec(t, info, token) }
	var nat, natExec []time.Duration
	for i := 0; i < rounds; i++ {
		id := sandbox.NewID()
		start := time.Now()
		info, err := e.native.Create(ctx, sandbox.Spec{ID: id, Template: tmpl, AccessToken: token})
		if err != nil {
			t.Fatal(err)
		}
		firstExec(info, token)
		nat = append(nat, time.Since(start))
		if i == 0 {
			natExec = benchExecRoundTrips(t, info, token)
		}
		if err := e.native.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("\n| create to first exec (%d rounds) | median |\n|---|---|\n| native backend (the node's, directly) | %s |\n| kube backend, cold (Sandbox → scheduler → agentbox node) | %s |\n| kube backend, pool hit (SandboxClaim) | %s |",
		rounds, benchMedian(nat), benchMedian(cold), benchMedian(hit))
	t.Logf("\n| exec `true` round trip (%d in a row) | p50 | p99 |\n|---|---|---|\n| native backend (agent on a unix socket) | %s |\n| kube backend on the agentbox node (agent on the pod IP) | %s |",
		execRounds, benchP50P99(natExec), benchP50P99(kubeExec))
}

// execRounds is how many exec round trips the benchmarks time in one sandbox.
const execRounds = 100

// benchExecRoundTrips times execRounds execs of `true` one after another
// in a running sandbox, through a client it keeps (as the daemon does).
func benchExecRoundTrips(t *testing.T, info sandbox.Info, token string) []time.Duration {
	t.Helper()
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address, Pid: info.Agent.Pid}, token)
	defer c.Close()
	ctx := ctxFor(t)
	out := make([]time.Duration, 0, execRounds)
	for i := 0; i < execRounds; i++ {
		start := time.Now()
		if r, err := backendtest.ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", "true"}}); err != nil || r.Exit.ExitCode != 0 {
			t.Fatalf("exec round trip: %+v, %v", r, err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// benchP50P99 formats the median and 99th percentile of durations in ms.
func benchP50P99(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return fmt.Sprintf("%.2f ms | %.2f ms", ms(s[len(s)/2]), ms(s[min(len(s)-1, len(s)*99/100)]))
}

// benchMedian formats the median (and range) of durations in ms.
func benchMedian(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("%.0f ms (min %.0f, max %.0f)", float64(s[len(s)/2].Microseconds())/1000, float64(s[0].Microseconds())/1000, float64(s[len(s)-1].Microseconds())/1000)
}

func benchFirstExec(t *testing.T, info sandbox.Info, token string) {
	t.Helper()
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address, Pid: info.Agent.Pid}, token)
	defer c.Close()
	if r, err := backendtest.ExecErr(ctxFor(t), c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", "echo ok"}}); err != nil || r.Stdout != "ok\n" {
		t.Fatalf("first exec: %+v, %v", r, err)
	}
}

// benchKube measures create-to-first-exec on b, rounds times cold and
// rounds times a pool hit (SandboxClaim of a warm pool of one), and exec
// round trips in the first cold sandbox.
func benchKube(t *testing.T, b *Backend, tmpl sandbox.Template, rounds int) (cold, hit, execs []time.Duration) {
	t.Helper()
	ctx := ctxFor(t)
	const token = "bench-token-0123456789abcdef"
	for i := 0; i < rounds; i++ {
		id := sandbox.NewID()
		start := time.Now()
		info, err := b.Create(ctx, sandbox.Spec{ID: id, Template: tmpl, AccessToken: token})
		if err != nil {
			t.Fatal(err)
		}
		benchFirstExec(t, info, token)
		cold = append(cold, time.Since(start))
		if i == 0 {
			execs = benchExecRoundTrips(t, info, token)
		}
		if err := b.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.EnsurePool(ctx, "bench", sandbox.Spec{Template: tmpl}, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.DeletePool(context.Background(), "bench") })
	for i := 0; i < rounds; i++ {
		waitPoolReady(t, b, "bench", 1)
		id := sandbox.NewID()
		start := time.Now()
		info, err := b.CreateFromPool(ctx, "bench", sandbox.Spec{ID: id, AccessToken: token})
		if err != nil {
			t.Fatal(err)
		}
		benchFirstExec(t, info, token)
		hit = append(hit, time.Since(start))
		if err := b.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	return cold, hit, execs
}
