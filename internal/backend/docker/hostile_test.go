package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/backend/docker/dockertest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// hostileImage imports the test image's root filesystem with config
// changes an image author (any image an auto-pulling tenant names) chooses.
func hostileImage(t *testing.T, api *client.Client, changes []string) string {
	t.Helper()
	ctx := ctxT(t)
	buf, err := dockertest.RootfsTar(dockertest.Options{Python: true})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(buf.Bytes())
	h.Write([]byte(strings.Join(changes, "\n")))
	name := "agentbox-test-hostile:" + hex.EncodeToString(h.Sum(nil)[:8])
	if _, err := api.ImageInspect(ctx, name); err == nil {
		return name
	} else if !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	rc, err := api.ImageImport(ctx, client.ImageImportSource{Source: buf, SourceName: "-"}, name, client.ImageImportOptions{Changes: changes})
	if err != nil {
		t.Fatalf("import %s: %v", name, err)
	}
	out, _ := io.ReadAll(rc)
	rc.Close()
	if _, err := api.ImageInspect(ctx, name); err != nil {
		t.Fatalf("import %s: %v (%s)", name, err, out)
	}
	return name
}

// TestSecurityHostileImageConfig runs a sandbox of an image whose config
// tries what an image author can put there: a health check the engine
// would run in the sandbox every millisecond (processes the agent does not
// start, and work for the engine's daemons outside the sandbox's limits),
// variables the backend owns (the agent's control token, which would open
// its reset routes to sandbox code through the socket it can reach), the
// backend's own labels, root, an entrypoint, a working directory, a
// volume. None of it may take effect beyond what docs/docker.md says: the
// image's ENV applies (but not AGENTBOX_*), its VOLUMEs are anonymous
// volumes removed with the sandbox.
func TestSecurityHostileImageConfig(t *testing.T) {
	api, _ := engine(t)
	image := hostileImage(t, api, []string{
		`HEALTHCHECK --interval=1ms --timeout=1s CMD ["/bin/sh", "-c", "id -u >> /tmp/healthcheck"]`,
		`ENV AGENTBOX_CONTROL_TOKEN=image-control-token`,
		`ENV AGENTBOX_ACCESS_TOKEN=image-access-token`,
		`ENV AGENTBOX_SERVICE='{"cmd":["/bin/sh","-c","echo service > /tmp/image-service; sleep 1000"]}'`,
		`ENV IMAGE_VAR=kept`,
		`LABEL io.agentbox.sandbox=victim io.agentbox.instance=other io.agentbox.backend=none`,
		`USER 0:0`,
		`ENTRYPOINT ["/bin/sh", "-c", "touch /tmp/entrypoint; sleep 1000"]`,
		`WORKDIR /etc`,
		`VOLUME /data`,
	})
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	const token = "sandbox-token"
	info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image), AccessToken: token})
	c := backendtest.Client(t, info, token)

	res, err := api.ContainerInspect(ctx, b.containerName(info.ID), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := res.Container.Config
	if got := cfg.Labels; got[LabelSandbox] != string(info.ID) || got[LabelInstance] != b.instance || got[LabelBackend] != "docker" {
		t.Errorf("the image's labels replaced the backend's: %v", got)
	}
	if cfg.User != "1000:1000" {
		t.Errorf("user %q: the image's USER took effect", cfg.User)
	}
	if cfg.Healthcheck == nil || !slices.Equal(cfg.Healthcheck.Test, []string{"NONE"}) {
		t.Errorf("the image's health check is on: %+v", cfg.Healthcheck)
	}
	// The engine would have run it many times by now.
	time.Sleep(time.Second)
	if res, err := api.ContainerInspect(ctx, b.containerName(info.ID), client.ContainerInspectOptions{}); err == nil && res.Container.State != nil && res.Container.State.Health != nil {
		h := res.Container.State.Health
		t.Errorf("the engine runs the image's health check in the sandbox: status %q, %d probes logged, failing streak %d", h.Status, len(h.Log), h.FailingStreak)
	}

	// Inside: the agent is PID 1 as uid 1000, nothing of the image ran, the
	// image's AGENTBOX_* reached neither the agent nor its processes.
	r := backendtest.Exec(t, c, `id -u; cat /proc/1/cmdline | tr '\0' ' '; echo; ls /tmp; env | grep -c '^AGENTBOX_'; echo "IMAGE_VAR=$IMAGE_VAR"`)
	out := r.Stdout
	if !strings.HasPrefix(out, "1000\n/opt/agentbox/agentbox-agent ") {
		t.Errorf("not the agent as uid 1000: %q", out)
	}
	for _, ran := range []string{"healthcheck", "entrypoint", "image-service"} {
		if strings.Contains(out, ran) {
			t.Errorf("the image's %s ran in the sandbox: %q", ran, out)
		}
	}
	if !strings.Contains(out, "\n0\nIMAGE_VAR=kept\n") {
		t.Errorf("AGENTBOX_* in the sandbox's environment, or the image's ENV lost: %q", out)
	}
	// The image's control token must not open the agent's reset routes to
	// sandbox code (which reaches the agent's socket on Docker).
	probe := `python3 -c '
import socket
for path in ("/reset/kill", "/reset/renew"):
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/agentbox/agent.sock")
    s.sendall(("POST " + path + " HTTP/1.0\r\nHost: x\r\nX-Agentbox-Control: image-control-token\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}").encode())
    print(path, s.recv(64).split()[1].decode())
'`
	r = backendtest.Exec(t, c, probe)
	if strings.Contains(r.Stdout, " 204") || strings.Contains(r.Stdout, " 400") || strings.Contains(r.Stdout, " 409") {
		t.Errorf("the image's control token opens the agent's reset routes: %q %q", r.Stdout, r.Stderr)
	}
	// The daemon's token still works (the sandbox is intact).
	if err := c.Health(ctx); err != nil {
		t.Fatalf("agent after the probes: %v", err)
	}
	if r := backendtest.Exec(t, c, "echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("exec after the probes: %+v", r)
	}

	// The image's VOLUME is an anonymous volume, which goes with the sandbox.
	var volumes []string
	for _, m := range res.Container.Mounts {
		if m.Type == "volume" {
			volumes = append(volumes, m.Name)
		}
	}
	if err := b.Destroy(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	for _, v := range volumes {
		if _, err := api.VolumeInspect(ctx, v, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("the image's volume %s outlived the sandbox: %v", v, err)
		}
	}
}

// TestSecurityCgroupNamespace: sandbox code sees its own cgroup as the
// root, not the engine's host path (which names the container), as on
// native; the backend still reads the sandbox's cgroup from the host.
func TestSecurityCgroupNamespace(t *testing.T) {
	_, image := engine(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: dockerTemplate(image)})
	c := backendtest.Client(t, info, "")
	r := backendtest.Exec(t, c, "cat /proc/self/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] != "/" {
			t.Errorf("host cgroup path visible in the sandbox: %q", line)
		}
	}
	st, err := b.Stats(ctx, info.ID)
	if err != nil || st.MemoryBytes <= 0 || st.PidsLimit <= 0 {
		t.Errorf("stats from the host: %+v, %v", st, err)
	}
	if err := b.Destroy(context.WithoutCancel(ctx), info.ID); err != nil {
		t.Fatal(err)
	}
}
