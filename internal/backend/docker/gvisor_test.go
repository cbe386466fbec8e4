package docker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// gvisorRuntime is the test engine's runtime name for runsc:
// AGENTBOX_DOCKER_GVISOR_RUNTIME, else runsc (scripts/start-docker.sh
// registers the pinned build under that name).
func gvisorRuntime() string {
	if rt := os.Getenv("AGENTBOX_DOCKER_GVISOR_RUNTIME"); rt != "" {
		return rt
	}
	return "runsc"
}

// TestGVisorDocker: with DOCKER_GVISOR_RUNTIME, a Docker sandbox at
// isolation gvisor is a container the engine starts with runsc; it runs
// on gVisor's kernel (a kernel release naming gVisor, not the host's;
// dmesg needs root, which the sandbox user is not), while a container
// sandbox of the same
// backend sees the host's; the agent's socket directory is out of the
// sandbox user's reach; what the level lacks is refused. It skips when
// the engine has no such runtime (an engine started without runsc
// registered, see scripts/start-docker.sh).
func TestGVisorDocker(t *testing.T) {
	api, image := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt := gvisorRuntime()
	info, err := api.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Info.Runtimes[rt]; !ok {
		t.Skipf("the Docker engine has no runtime %q (scripts/start-docker.sh registers the pinned runsc when it starts dockerd)", rt)
	}
	b, err := New(ctx, Config{Root: testutil.ShortTempDir(t), AgentPath: testutil.AgentBinary(t), GVisorRuntime: rt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		assertNoContainers(t, b.api, b.instance)
		b.Close()
	})
	caps := b.Capabilities()
	if len(caps.Isolation) != 2 || caps.GVisor == nil || !caps.GVisor.NoPause {
		t.Errorf("capabilities with a gVisor runtime: %+v", caps)
	}

	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(host.Release[:])
	g := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image), Isolation: sandbox.IsolationGVisor})
	r := backendtest.Exec(t, backendtest.Client(t, g, ""), "cat /proc/sys/kernel/osrelease; echo; cat /proc/version; id -u")
	lines := strings.Split(r.Stdout, "\n")
	if len(lines) < 3 || lines[0] == hostRelease || !strings.Contains(lines[0], "gvisor") || !strings.Contains(r.Stdout, "\n1000\n") {
		t.Errorf("a gVisor Docker sandbox: %q (%s), want gVisor's kernel release (the host's is %q) and uid 1000", r.Stdout, r.Stderr, hostRelease)
	}
	b.mu.Lock()
	cid := b.boxes[g.ID].rec.Container
	b.mu.Unlock()
	ct, err := api.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	if err != nil || ct.Container.HostConfig == nil || ct.Container.HostConfig.Runtime != rt {
		t.Errorf("the engine's container of a gVisor sandbox: runtime %v %v, want %q", ct.Container.HostConfig, err, rt)
	}
	// The agent's socket directory is root's inside gVisor: the sandbox
	// user can neither list it nor bind a socket of its own there.
	r = backendtest.Exec(t, backendtest.Client(t, g, ""), "ls "+runInSandbox+" 2>&1; echo x > "+runInSandbox+"/f 2>&1; true")
	if !strings.Contains(r.Stdout, "Permission denied") || strings.Contains(r.Stdout, socketName) {
		t.Errorf("the sandbox user reaches the agent's socket directory: %q", r.Stdout)
	}
	if _, err := b.DialPort(ctx, g.ID, 80); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("DialPort of a gVisor Docker sandbox: %v, want class %s", err, sandbox.ClassUnavailable)
	}
	if err := b.Pause(ctx, g.ID); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("pause of a gVisor Docker sandbox: %v, want class %s", err, sandbox.ClassUnavailable)
	}
	if _, err := b.Create(ctx, sandbox.Spec{ID: sandbox.NewID(), Template: dockerTemplate(image), Isolation: sandbox.IsolationGVisor, Root: true}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("a root gVisor Docker sandbox: %v, want class %s", err, sandbox.ClassInvalid)
	}

	c := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
	r = backendtest.Exec(t, backendtest.Client(t, c, ""), "cat /proc/sys/kernel/osrelease")
	if got := strings.TrimSpace(r.Stdout); got != hostRelease {
		t.Errorf("a container Docker sandbox's kernel release = %q, want the host's %q", got, hostRelease)
	}
}
