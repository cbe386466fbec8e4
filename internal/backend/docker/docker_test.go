package docker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/backend/docker/dockertest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// engine returns a client of the test engine and the test image. Without
// an engine the test skips, except under AGENTBOX_REQUIRE_DOCKER=1 (make
// test starts dockerd and sets it), where it fails.
func engine(t *testing.T) (*client.Client, string) {
	t.Helper()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, err := dockertest.Available(ctx)
	if err != nil {
		if os.Getenv("AGENTBOX_REQUIRE_DOCKER") == "1" {
			t.Fatalf("no Docker engine: %v", err)
		}
		t.Skipf("no Docker engine: %v", err)
	}
	t.Cleanup(func() { api.Close() })
	image, err := dockertest.EnsureImage(ctx, api, dockertest.Options{})
	if err != nil {
		t.Fatalf("test image: %v", err)
	}
	return api, image
}

// newTestBackend returns a Docker backend over dir, abandoned (not
// destroyed) at cleanup: tests destroy their own sandboxes. The cleanup
// asserts that no container of the backend is left.
func newTestBackend(t *testing.T, dir string) *Backend {
	t.Helper()
	b, err := New(context.Background(), Config{Root: dir, AgentPath: testutil.AgentBinary(t)})
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	t.Cleanup(func() {
		assertNoContainers(t, b.api, b.instance)
		b.Close()
	})
	return b
}

// assertNoContainers fails when a container of instance is left (and
// removes it, so one failure does not leak into the next test).
func assertNoContainers(t *testing.T, api *client.Client, instance string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelInstance+"="+instance)})
	if err != nil {
		t.Errorf("list containers: %v", err)
		return
	}
	for _, c := range list.Items {
		t.Errorf("container %v (sandbox %s) left behind", c.Names, c.Labels[LabelSandbox])
		_, _ = api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
}

func dockerTemplate(image string) sandbox.Template {
	return sandbox.Template{Ref: image, Kind: sandbox.TemplateDocker}
}

func TestConformance(t *testing.T) {
	_, image := engine(t)
	backendtest.Run(t, backendtest.Harness{
		New:      func(t *testing.T, dir string) backend.Backend { return newTestBackend(t, dir) },
		StateDir: func(t *testing.T) string { return testutil.ShortTempDir(t) },
		Template: dockerTemplate(image),
		Abandon:  func(b backend.Backend) { b.(*Backend).Abandon() },
	})
}

// TestSecurity runs the security checks both backends pass (see
// backendtest.RunSecurity) on a Docker sandbox. The agent's socket is in
// the sandbox (a bind-mounted directory: the engine cannot hand the agent
// a descriptor), and the state dir shows in mountinfo (bind mounts name
// their source): both documented in docs/docker.md.
func TestSecurity(t *testing.T) {
	api, _ := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image, err := dockertest.EnsureImage(ctx, api, dockertest.Options{Python: true})
	if err != nil {
		t.Fatal(err)
	}
	b := newTestBackend(t, testutil.ShortTempDir(t))
	backendtest.RunSecurity(t, backendtest.Security{
		Backend:        b,
		Template:       dockerTemplate(image),
		AgentInSandbox: agentInSandbox,
	})
	// What stands in for native's hidden socket: sandbox code reaches the
	// agent's socket but not its token (scrubbed from the environment,
	// PID 1 not dumpable), so every call but /health is refused.
	t.Run("AgentSocketNeedsToken", func(t *testing.T) {
		const token = "agentbox-test-token"
		info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image), AccessToken: token})
		c := backendtest.Client(t, info, token)
		probe := `python3 -c '
import socket
for path in ("/envs", "/health"):
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/agentbox/agent.sock")
    s.sendall(("GET " + path + " HTTP/1.0\r\nHost: x\r\n\r\n").encode())
    print(path, s.recv(64).split()[1].decode())
'; cat /proc/1/environ 2>&1 | head -c 200; echo; env | grep -c AGENTBOX_`
		r := backendtest.Exec(t, c, probe)
		if !strings.Contains(r.Stdout, "/envs 401\n") || !strings.Contains(r.Stdout, "/health 204\n") {
			t.Fatalf("agent socket from inside: %q %q", r.Stdout, r.Stderr)
		}
		if strings.Contains(r.Stdout, token) || !strings.HasSuffix(r.Stdout, "\n0\n") {
			t.Fatalf("the token is visible inside the sandbox: %q", r.Stdout)
		}
	})
	// Sandbox code can replace its agent's socket (its directory is the
	// sandbox user's): a symlink there must not make the daemon, root on
	// the host, connect to a host socket the link names.
	t.Run("AgentSocketSymlinkNotFollowed", func(t *testing.T) {
		hostSock := filepath.Join(testutil.ShortTempDir(t), "host.sock")
		ln, err := net.Listen("unix", hostSock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var accepted atomic.Int32
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
		info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
		c := backendtest.Client(t, info, "")
		r := backendtest.Exec(t, c, `python3 -c 'import os; os.remove("/run/agentbox/agent.sock"); os.symlink("`+hostSock+`", "/run/agentbox/agent.sock")' && echo replaced`)
		if r.Stdout != "replaced\n" {
			t.Fatalf("replace the socket: %+v", r)
		}
		fresh := backendtest.Client(t, info, "")
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = fresh.Health(hctx)
		cancel()
		if err == nil {
			t.Fatal("a health check through the symlink succeeded")
		}
		time.Sleep(100 * time.Millisecond)
		if n := accepted.Load(); n != 0 {
			t.Fatalf("the daemon's client connected to the host socket the sandbox linked (%d connections)", n)
		}
	})
	// Or sandbox code listens where its agent's socket was: the daemon
	// connects only to a socket the agent (its host pid) listens on.
	t.Run("AgentImpostorRefused", func(t *testing.T) {
		info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
		if info.Agent.Pid == 0 {
			t.Fatal("the Docker backend does not name its agent's pid")
		}
		c := backendtest.Client(t, info, "")
		impostor := `import os, socket
os.remove("/run/agentbox/agent.sock")
s = socket.socket(socket.AF_UNIX)
s.bind("/run/agentbox/agent.sock")
s.listen(8)
while True:
    conn, _ = s.accept()
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
    conn.close()`
		inode := func() string {
			return strings.TrimSpace(backendtest.Exec(t, c, "stat -c %i /run/agentbox/agent.sock 2>/dev/null").Stdout)
		}
		agentInode := inode()
		if agentInode == "" {
			t.Fatal("no agent socket")
		}
		ictx, cancel := context.WithCancel(ctx)
		defer cancel()
		go backendtest.ExecErr(ictx, c, agentclient.StartOptions{Cmd: "python3", Args: []string{"-c", impostor}})
		deadline := time.Now().Add(20 * time.Second)
		for {
			// Replaced once another socket inode is there.
			if n := inode(); n != "" && n != agentInode {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("impostor did not start")
			}
			time.Sleep(100 * time.Millisecond)
		}
		fresh := backendtest.Client(t, info, "")
		hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
		err := fresh.Health(hctx)
		hcancel()
		if err == nil {
			t.Fatal("the daemon's client talked to the sandbox's impostor agent")
		}
		if !strings.Contains(err.Error(), "not the agent") {
			t.Fatalf("health through the impostor: %v (want a refused peer)", err)
		}
	})
}
