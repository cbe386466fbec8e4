package docker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/backend/docker/dockertest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestContainerLockedDown checks what the engine was asked for: the
// container the engine reports has every lock of the native backend that
// the engine expresses, the labels, and no engine socket or published port.
func TestContainerLockedDown(t *testing.T) {
	api, image := engine(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image),
		Resources: sandbox.Resources{MemoryBytes: 128 << 20, PIDs: 100, CPUs: 0.5}})
	res, err := api.ContainerInspect(ctx, b.containerName(info.ID), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, h := res.Container, res.Container.HostConfig
	if c.Config.Labels[LabelSandbox] != string(info.ID) || c.Config.Labels[LabelInstance] != b.instance || c.Config.Labels[LabelBackend] != "docker" {
		t.Errorf("labels = %v", c.Config.Labels)
	}
	if h.Privileged || !h.ReadonlyRootfs || !slices.Equal(h.CapDrop, []string{"ALL"}) || len(h.CapAdd) != 0 {
		t.Errorf("privileged %v readonly %v capdrop %v capadd %v", h.Privileged, h.ReadonlyRootfs, h.CapDrop, h.CapAdd)
	}
	if h.NetworkMode != "none" || len(h.PortBindings) != 0 || h.PublishAllPorts {
		t.Errorf("network %q ports %v publish-all %v", h.NetworkMode, h.PortBindings, h.PublishAllPorts)
	}
	if h.Memory != 128<<20 || h.MemorySwap != 128<<20 || h.PidsLimit == nil || *h.PidsLimit != 100 || h.NanoCPUs != 5e8 {
		t.Errorf("limits: memory %d swap %d pids %v cpus %d", h.Memory, h.MemorySwap, h.PidsLimit, h.NanoCPUs)
	}
	var nnp, seccomp bool
	for _, o := range h.SecurityOpt {
		nnp = nnp || o == "no-new-privileges"
		seccomp = seccomp || strings.HasPrefix(o, "seccomp=") && strings.Contains(o, `"io_uring_setup"`)
	}
	if !nnp || !seccomp {
		t.Errorf("security options lack no-new-privileges or agentbox's seccomp profile")
	}
	if c.Config.User != "1000:1000" {
		t.Errorf("user %q", c.Config.User)
	}
	if !h.CgroupnsMode.IsPrivate() || h.PidMode != "" || h.IpcMode.IsHost() || h.UTSMode != "" || h.UsernsMode.IsHost() {
		t.Errorf("namespaces: cgroup %q pid %q ipc %q uts %q userns %q", h.CgroupnsMode, h.PidMode, h.IpcMode, h.UTSMode, h.UsernsMode)
	}
	if hc := c.Config.Healthcheck; hc == nil || !slices.Equal(hc.Test, []string{"NONE"}) {
		t.Errorf("health check %+v: want none", hc)
	}
	if len(h.Devices) != 0 || len(h.DeviceCgroupRules) != 0 || len(h.Binds) != 0 || len(h.VolumesFrom) != 0 || len(h.ExtraHosts) != 0 {
		t.Errorf("devices %v rules %v binds %v volumes-from %v", h.Devices, h.DeviceCgroupRules, h.Binds, h.VolumesFrom)
	}
	for _, m := range c.Mounts {
		if strings.Contains(m.Source, "docker.sock") || strings.Contains(m.Source, "/var/run/docker") || strings.Contains(m.Source, "/var/lib/docker/") && m.Type == "bind" {
			t.Errorf("engine state mounted into the sandbox: %+v", m)
		}
		if m.Destination == agentInSandbox && m.RW {
			t.Errorf("agent binary mounted writable")
		}
	}
	// Inside: the agent is PID 1, and the engine's socket is nowhere.
	r := backendtest.Exec(t, backendtest.Client(t, info, ""), "ls -A /var/run/docker.sock /run/docker.sock 2>&1; cat /proc/1/cmdline | tr '\\0' ' '")
	if strings.Contains(r.Stdout, "docker.sock\n") && !strings.Contains(r.Stdout, "No such file") {
		t.Errorf("docker socket in the sandbox: %q", r.Stdout)
	}
	// Nor the engine's abstract sockets (containerd's, its shims'): they
	// are per network namespace, and the sandbox has its own.
	r = backendtest.Exec(t, backendtest.Client(t, info, ""), "grep -e containerd -e docker /proc/net/unix; ls /sys/class/net")
	if r.Stdout != "lo\n" {
		t.Errorf("engine sockets or host interfaces visible in the sandbox: %q", r.Stdout)
	}
}

// TestPauseResume maps pause and resume to the engine's freezer: a paused
// sandbox's agent does not answer, and everything continues after resume.
func TestPauseResume(t *testing.T) {
	_, image := engine(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
	c := backendtest.Client(t, info, "")
	backendtest.Exec(t, c, "echo before > /workspace/f")
	if err := b.Pause(ctx, info.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := b.Pause(ctx, info.ID); err != nil {
		t.Fatalf("second pause: %v", err)
	}
	got, err := b.Inspect(ctx, info.ID)
	if err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("inspect paused = %+v, %v", got, err)
	}
	hctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = c.Health(hctx)
	cancel()
	if err == nil {
		t.Fatal("a paused sandbox's agent answered")
	}
	if err := b.Resume(ctx, info.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if r := backendtest.Exec(t, c, "cat /workspace/f"); r.Stdout != "before\n" {
		t.Fatalf("after resume: %+v", r)
	}
	if err := b.Resume(ctx, info.ID); err != nil {
		t.Fatalf("resume of a running sandbox: %v", err)
	}
	// A paused sandbox can be stopped and destroyed.
	if err := b.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx, info.ID); err != nil {
		t.Fatalf("stop paused: %v", err)
	}
	if err := b.Resume(ctx, info.ID); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("resume stopped: %v, want conflict", err)
	}
	if err := b.Pause(ctx, "no-such-sandbox"); !sandbox.IsNotFound(err) {
		t.Fatalf("pause unknown: %v", err)
	}
}

// TestAgentExitReported: when the agent dies on its own (here: the
// engine kills the container behind the backend's back), the backend
// records the sandbox as stopped and tells the ExitWatcher; Start boots it
// again with its files.
func TestAgentExitReported(t *testing.T) {
	api, image := engine(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	exits := make(chan string, 4)
	b.OnAgentExit(func(id sandbox.ID, reason string) { exits <- string(id) + ": " + reason })
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
	backendtest.Exec(t, backendtest.Client(t, info, ""), "echo kept > /workspace/f")
	if _, err := api.ContainerKill(ctx, b.containerName(info.ID), client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-exits:
		if !strings.HasPrefix(got, string(info.ID)+": agent exited") {
			t.Fatalf("exit report = %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent exit not reported")
	}
	got, err := b.Inspect(ctx, info.ID)
	if err != nil || got.State != sandbox.StateStopped || !strings.Contains(got.Reason, "agent exited") {
		t.Fatalf("inspect after exit = %+v, %v", got, err)
	}
	info, err = b.Start(ctx, info.ID)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if r := backendtest.Exec(t, backendtest.Client(t, info, ""), "cat /workspace/f"); r.Stdout != "kept\n" {
		t.Fatalf("after restart: %+v", r)
	}
	// Stopping on purpose is not reported.
	if err := b.Stop(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-exits:
		t.Fatalf("a stop was reported as an agent exit: %q", got)
	case <-time.After(time.Second):
	}
}

// TestRecoverRemovesOrphans: a labelled container of this instance that no
// record names, and a record whose container is gone, are removed by
// Recover; containers of other instances are left alone.
func TestRecoverRemovesOrphans(t *testing.T) {
	api, image := engine(t)
	dir := testutil.ShortTempDir(t)
	b := newTestBackend(t, dir)
	ctx := ctxT(t)
	kept := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
	mk := func(instance string) string {
		res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config:     &container.Config{Image: image, Cmd: []string{"sleep", "600"}, Labels: map[string]string{LabelInstance: instance, LabelSandbox: "orphan"}},
			HostConfig: &container.HostConfig{NetworkMode: "none"},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { api.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true}) })
		return res.ID
	}
	orphan := mk(b.instance)
	other := mk("someone-else")
	// A record without a container: a create that died half-way.
	halfID := sandbox.NewID()
	half := filepath.Join(dir, "sb", string(halfID))
	if err := os.MkdirAll(half, 0o711); err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf(`{"spec":{"id":%q,"template":{"ref":%q,"kind":"docker"}},"container":%q}`, halfID, image, b.containerName(halfID))
	if err := os.WriteFile(filepath.Join(half, "record.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Abandon()
	b2 := newTestBackend(t, dir)
	infos, err := b2.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if len(infos) != 1 || infos[0].ID != kept.ID || infos[0].State != sandbox.StateRunning {
		t.Fatalf("recovered %+v, want only %s running", infos, kept.ID)
	}
	if _, err := api.ContainerInspect(ctx, orphan, client.ContainerInspectOptions{}); err == nil {
		t.Error("orphaned container of this instance not removed")
	}
	if _, err := api.ContainerInspect(ctx, other, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("another instance's container removed: %v", err)
	}
	if _, err := os.Stat(half); !os.IsNotExist(err) {
		t.Errorf("half-created sandbox dir left: %v", err)
	}
	if err := b2.Destroy(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
}

// TestDialPort reaches a server in a network-less sandbox from the host
// (preview URLs) without publishing a port.
func TestDialPort(t *testing.T) {
	api, _ := engine(t)
	image, err := dockertest.EnsureImage(ctxT(t), api, dockertest.Options{Python: true})
	if err != nil {
		t.Fatal(err)
	}
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
	c := backendtest.Client(t, info, "")
	go backendtest.ExecErr(ctx, c, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c",
		"cd /workspace && echo served > index.html && exec python3 -m http.server 8000 --bind 127.0.0.1"}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := b.DialPort(ctx, info.ID, 8000)
		if err == nil {
			fmt.Fprintf(conn, "GET /index.html HTTP/1.0\r\n\r\n")
			body, _ := bufio.NewReader(conn).ReadString(0)
			conn.Close()
			if !strings.Contains(body, "served") {
				t.Fatalf("response %q", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial port 8000: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := b.DialPort(ctx, info.ID, 70000); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("port 70000: %v", err)
	}
}

// TestRecoverPaused: a sandbox paused when the daemon went away is found
// paused by the next one, and resumes.
func TestRecoverPaused(t *testing.T) {
	_, image := engine(t)
	dir := testutil.ShortTempDir(t)
	b := newTestBackend(t, dir)
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
	if err := b.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	b.Abandon()
	b2 := newTestBackend(t, dir)
	infos, err := b2.Recover(ctx)
	if err != nil || len(infos) != 1 || infos[0].State != sandbox.StatePaused {
		t.Fatalf("recover = %+v, %v; want one paused sandbox", infos, err)
	}
	if err := b2.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if r := backendtest.Exec(t, backendtest.Client(t, infos[0], ""), "echo back"); r.Stdout != "back\n" {
		t.Fatalf("after resume: %+v", r)
	}
	if err := b2.Destroy(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
}

// cutProxy forwards unix connections to the engine's socket and can cut
// every open one, as an engine restart or a dropped connection would.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, path string) *cutProxy {
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(func() { p.ln.Close(); p.cut() })
	p.serve()
	return p
}

// down closes the proxy: the engine is unreachable until up.
func (p *cutProxy) down() {
	p.ln.Close()
	p.cut()
}

func (p *cutProxy) up(t *testing.T) {
	path := p.ln.Addr().String()
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	p.serve()
}

func (p *cutProxy) serve() {
	ln := p.ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", "/var/run/docker.sock")
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestEngineConnectionLossIsNotAnExit: when the connection the backend
// waits on breaks while the container runs, the sandbox is not reported
// dead; it keeps being watched, and a real exit afterwards is reported.
func TestEngineConnectionLossIsNotAnExit(t *testing.T) {
	api, image := engine(t)
	dir := testutil.ShortTempDir(t)
	proxy := newCutProxy(t, filepath.Join(dir, "engine.sock"))
	b, err := New(context.Background(), Config{Root: filepath.Join(dir, "state"), AgentPath: testutil.AgentBinary(t), Host: "unix://" + proxy.ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { assertNoContainers(t, api, b.instance); b.Close() })
	exits := make(chan string, 4)
	b.OnAgentExit(func(id sandbox.ID, reason string) { exits <- reason })
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
	proxy.cut()
	select {
	case r := <-exits:
		t.Fatalf("a cut connection was reported as an agent exit: %q", r)
	case <-time.After(2 * time.Second):
	}
	if got, err := b.Inspect(ctx, info.ID); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("inspect after the cut = %+v, %v", got, err)
	}
	if _, err := api.ContainerKill(ctx, b.containerName(info.ID), client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-exits:
		if !strings.HasPrefix(r, "agent exited") {
			t.Fatalf("exit reason %q", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the exit after a cut connection was not reported")
	}
}

// TestCreateRefusals: what the Docker backend refuses, each with a clear
// class and nothing left behind.
func TestCreateRefusals(t *testing.T) {
	api, image := engine(t)
	dir := testutil.ShortTempDir(t)
	b := newTestBackend(t, dir)
	ctx := ctxT(t)
	cases := map[string]sandbox.Spec{
		"egress":        {Template: dockerTemplate(image), Network: sandbox.Network{Mode: sandbox.NetworkEgress}},
		"host template": {Template: sandbox.HostTemplate()},
		"missing image": {Template: dockerTemplate("agentbox-no-such-image:1")},
		"bad mount":     {Template: dockerTemplate(image), Mounts: []sandbox.Mount{{Source: "/srv", Target: "/run/agentbox"}}},
	}
	if !b.UsernsRemap() {
		cases["root without userns-remap"] = sandbox.Spec{Template: dockerTemplate(image), Root: true}
	}
	for name, spec := range cases {
		spec.ID = sandbox.NewID()
		if _, err := b.Create(ctx, spec); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%s: %v, want invalid_argument", name, err)
			_ = b.Destroy(ctx, spec.ID)
		}
		if _, err := os.Stat(filepath.Join(dir, "sb", string(spec.ID))); !os.IsNotExist(err) {
			t.Errorf("%s: sandbox dir left: %v", name, err)
		}
	}
	// A container of the sandbox's name that the backend does not know
	// (another process's) is a conflict, and is left alone.
	id := sandbox.NewID()
	res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: b.containerName(id),
		Config: &container.Config{Image: image, Cmd: []string{"sleep", "60"}}, HostConfig: &container.HostConfig{NetworkMode: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true}) })
	if _, err := b.Create(ctx, sandbox.Spec{ID: id, Template: dockerTemplate(image)}); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Fatalf("create over a foreign container: %v, want conflict", err)
	}
	if _, err := api.ContainerInspect(ctx, res.ID, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("the foreign container was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb", string(id))); !os.IsNotExist(err) {
		t.Errorf("sandbox dir left after the conflict: %v", err)
	}
}

// TestDestroyWithoutEngine: a destroy the engine cannot carry out fails
// and keeps the sandbox, so a retry once the engine is back removes it.
func TestDestroyWithoutEngine(t *testing.T) {
	api, image := engine(t)
	dir := testutil.ShortTempDir(t)
	proxy := newCutProxy(t, filepath.Join(dir, "engine.sock"))
	b, err := New(context.Background(), Config{Root: filepath.Join(dir, "state"), AgentPath: testutil.AgentBinary(t), Host: "unix://" + proxy.ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { assertNoContainers(t, api, b.instance); b.Close() })
	ctx := ctxT(t)
	info, err := b.Create(ctx, sandbox.Spec{ID: sandbox.NewID(), Template: dockerTemplate(image)})
	if err != nil {
		t.Fatal(err)
	}
	proxy.down()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = b.Destroy(dctx, info.ID)
	cancel()
	if err == nil {
		t.Fatal("destroy without an engine succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "sb", string(info.ID), "record.json")); err != nil {
		t.Fatalf("the record went with a failed destroy: %v", err)
	}
	proxy.up(t)
	if err := b.Destroy(ctx, info.ID); err != nil {
		t.Fatalf("destroy once the engine is back: %v", err)
	}
	if _, err := api.ContainerInspect(ctx, b.containerName(info.ID), client.ContainerInspectOptions{}); err == nil {
		t.Fatal("container left")
	}
}
