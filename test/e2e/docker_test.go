package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mobyclient "github.com/moby/moby/client"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/docker/dockertest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// dockerEngine returns a client of the test engine and a test image with
// python3, or skips (fails under AGENTBOX_REQUIRE_DOCKER=1).
func dockerEngine(t *testing.T) (*mobyclient.Client, string) {
	t.Helper()
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
	image, err := dockertest.EnsureImage(ctx, api, dockertest.Options{Python: true})
	if err != nil {
		t.Fatal(err)
	}
	return api, image
}

// checkNoContainers registers, before the daemon's own cleanup (so it
// runs after the daemon stopped), a check that no container of *d's Docker
// backend is left; leftovers are removed so a failure does not leak.
func checkNoContainers(t *testing.T, api *mobyclient.Client, d **daemon) {
	t.Cleanup(func() {
		if *d == nil {
			return
		}
		list, err := api.ContainerList(context.Background(), mobyclient.ContainerListOptions{All: true,
			Filters: mobyclient.Filters{}.Add("label", docker.LabelInstance+"="+dockerInstance((*d).dataDir))})
		if err != nil {
			t.Errorf("list containers: %v", err)
			return
		}
		for _, c := range list.Items {
			t.Errorf("container of sandbox %s left behind", c.Labels[docker.LabelSandbox])
			_, _ = api.ContainerRemove(context.Background(), c.ID, mobyclient.ContainerRemoveOptions{Force: true})
		}
	})
}

// dockerInstance is the instance label of the Docker backend of d.
func dockerInstance(dataDir string) string {
	sum := sha256.Sum256([]byte(filepath.Join(dataDir, "docker")))
	return hex.EncodeToString(sum[:6])
}

// dockerContainers lists the containers of d's Docker backend.
func dockerContainers(t *testing.T, api *mobyclient.Client, dataDir string) []string {
	t.Helper()
	list, err := api.ContainerList(context.Background(), mobyclient.ContainerListOptions{All: true,
		Filters: mobyclient.Filters{}.Add("label", docker.LabelInstance+"="+dockerInstance(dataDir))})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range list.Items {
		out = append(out, c.Labels[docker.LabelSandbox]+" "+string(c.State))
	}
	return out
}

// TestDockerSandbox creates a docker: sandbox through the native API beside
// a native one: exec, files, a code context, pause and resume through the
// engine's freezer, tenant isolation, a daemon restart that reattaches,
// and delete removing the container.
func TestDockerSandbox(t *testing.T) {
	api, image := dockerEngine(t)
	var d *daemon
	checkNoContainers(t, api, &d)
	d = startDaemon(t, "API_KEYS=ka:alice,kb:bob", "DOCKER_BACKEND=true", "AUTO_CLEANUP=false")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice, bob := d.sdk(t, "ka"), d.sdk(t, "kb")

	info, err := alice.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Backend != "native+docker" || !strings.Contains(fmt.Sprint(info.Capabilities["templates"]), "docker") {
		t.Fatalf("server info: backend %q capabilities %v", info.Backend, info.Capabilities)
	}

	sb, err := alice.Create(ctx, client.CreateRequest{Template: "docker:" + image, Env: map[string]string{"GREETING": "hello docker"}})
	if err != nil {
		t.Fatalf("create docker sandbox: %v", err)
	}
	defer alice.Delete(context.Background(), sb.ID)
	nat, err := alice.Create(ctx, client.CreateRequest{Template: "host"})
	if err != nil {
		t.Fatalf("create native sandbox beside it: %v", err)
	}
	defer alice.Delete(context.Background(), nat.ID)
	if got := dockerContainers(t, api, d.dataDir); len(got) != 1 || !strings.HasPrefix(got[0], sb.ID+" running") {
		t.Fatalf("containers = %v, want only %s running", got, sb.ID)
	}

	res, err := alice.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", `echo "$GREETING"; id -u; hostname; pwd`}})
	if err != nil || res.Stdout != "hello docker\n1000\n"+sb.ID+"\n/workspace\n" {
		t.Fatalf("exec = %+v, %v", res, err)
	}
	if _, err := alice.Upload(ctx, sb.ID, "/workspace/data.txt", strings.NewReader("file body"), 9, nil); err != nil {
		t.Fatalf("upload: %v", err)
	}
	rc, _, err := alice.Download(ctx, sb.ID, "/workspace/data.txt")
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	body, _ := io.ReadAll(rc)
	rc.Close()
	if string(body) != "file body" {
		t.Fatalf("download = %q", body)
	}

	status, data, x := runCode(t, d, "ka", sb.ID, map[string]any{"code": "x = 6 * 7\nx"})
	if status != 200 || x.text() != "42" {
		t.Fatalf("code = %d %s %+v", status, data, x)
	}

	// Another tenant sees nothing of it.
	if _, err := bob.Get(ctx, sb.ID); !client.IsNotFound(err) {
		t.Fatalf("bob gets alice's docker sandbox: %v", err)
	}

	// Pause freezes the container in the engine; resume thaws it, and the
	// code context kept its state.
	if _, err := alice.Pause(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	st, err := api.ContainerInspect(ctx, "agentbox-"+dockerInstance(d.dataDir)+"-"+sb.ID, mobyclient.ContainerInspectOptions{})
	if err != nil || !st.Container.State.Paused {
		t.Fatalf("container not paused in the engine: %+v %v", st.Container.State, err)
	}
	if got, err := alice.Get(ctx, sb.ID); err != nil || got.State != "paused" {
		t.Fatalf("state after pause = %+v, %v", got, err)
	}
	if _, err := alice.Resume(ctx, sb.ID, 0); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, _, x := runCode(t, d, "ka", sb.ID, map[string]any{"code": "x + 1"}); x == nil || x.text() != "43" {
		t.Fatalf("code context after resume: %+v", x)
	}

	// Stop and start: a new agent process (a new pid the daemon's client
	// checks), the files kept.
	for _, op := range []string{"stop", "start"} {
		if status, data := d.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/"+op, "ka", map[string]any{}); status != 200 {
			t.Fatalf("%s: %d %s", op, status, data)
		}
	}
	res, err = alice.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/workspace/data.txt"}})
	if err != nil || res.Stdout != "file body" {
		t.Fatalf("exec after stop/start = %+v, %v", res, err)
	}

	// A restarted daemon reattaches to the running container.
	d.stop()
	d.start()
	alice = d.sdk(t, "ka")
	res, err = alice.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/workspace/data.txt"}})
	if err != nil || res.Stdout != "file body" {
		t.Fatalf("exec after daemon restart = %+v, %v", res, err)
	}

	// An unknown image is a clear client error, and leaves nothing.
	_, err = alice.Create(ctx, client.CreateRequest{Template: "docker:agentbox-no-such-image:1"})
	if err == nil || !strings.Contains(err.Error(), "no such image") {
		t.Fatalf("create from a missing image: %v", err)
	}
	_, err = alice.Create(ctx, client.CreateRequest{Template: "docker:Not A Ref"})
	if err == nil || !strings.Contains(err.Error(), "not a Docker image reference") {
		t.Fatalf("create from a bad reference: %v", err)
	}

	if err := alice.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := alice.Delete(ctx, nat.ID); err != nil {
		t.Fatal(err)
	}
	if got := dockerContainers(t, api, d.dataDir); len(got) != 0 {
		t.Fatalf("containers after delete: %v", got)
	}
	entries, _ := os.ReadDir(filepath.Join(d.dataDir, "docker", "sb"))
	if len(entries) != 0 {
		t.Fatalf("sandbox state left in the docker state dir: %d entries", len(entries))
	}
}

// TestDockerTemplateFromStore: an agentbox template of the store runs on
// the Docker backend as docker:NAME — the engine lacks the image, so the
// backend loads the store's docker export into it.
func TestDockerTemplateFromStore(t *testing.T) {
	api, _ := dockerEngine(t)
	var d *daemon
	checkNoContainers(t, api, &d)
	d = startDaemon(t, "DOCKER_BACKEND=true")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := d.sdk(t, "")
	name := "abxtest-" + strings.ToLower(dockerInstance(d.dataDir))
	t.Cleanup(func() {
		_, _ = api.ImageRemove(context.Background(), name+":latest", mobyclient.ImageRemoveOptions{Force: true})
	})
	rootfs, err := dockertest.RootfsTar(dockertest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ImportTemplate(ctx, name, rootfs, int64(rootfs.Len()), nil, nil); err != nil {
		t.Fatalf("import template: %v", err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Template: "docker:" + name})
	if err != nil {
		t.Fatalf("create docker:%s: %v", name, err)
	}
	defer c.Delete(context.Background(), sb.ID)
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "id -u; ls /workspace && echo ok"}})
	if err != nil || res.Stdout != "1000\nok\n" {
		t.Fatalf("exec = %+v, %v", res, err)
	}
	if _, err := api.ImageInspect(ctx, name+":latest"); err != nil {
		t.Fatalf("template not loaded into the engine: %v", err)
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// TestDockerDeploymentAgentscope: with CONTAINER_DEPLOYMENT=docker the
// agentscope API's sandbox types run agentscope's image names
// (RUNTIME_SANDBOX_* settings) on the engine — here the test image, tagged
// under a namespace of this test's own.
func TestDockerDeploymentAgentscope(t *testing.T) {
	api, image := dockerEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "abxtest" + string(sandbox.NewID())[:8]
	tagged := ns + "/runtime-sandbox-base:t1"
	if _, err := api.ImageTag(ctx, mobyclient.ImageTagOptions{Source: image, Target: tagged}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = api.ImageRemove(context.Background(), tagged, mobyclient.ImageRemoveOptions{})
	})
	var d *daemon
	checkNoContainers(t, api, &d)
	d = startDaemon(t, "BEARER_TOKEN="+asToken, "CONTAINER_DEPLOYMENT=docker",
		"RUNTIME_SANDBOX_IMAGE_NAMESPACE="+ns, "RUNTIME_SANDBOX_IMAGE_TAG=t1", "POOL_SIZE=1")
	status, body := asCall(t, d, "create", asToken, map[string]any{"sandbox_type": "base"})
	id, _ := body["data"].(string)
	if status != 200 || id == "" {
		t.Fatalf("create: %d %v", status, body)
	}
	status, body = asCall(t, d, "call_tool", asToken, map[string]any{"identity": id,
		"tool_name": "run_shell_command", "arguments": map[string]any{"command": "id -u; test -x /opt/agentbox/agentbox-agent && echo on-docker"}})
	out, _ := json.Marshal(body)
	if status != 200 || !strings.Contains(string(out), `"text":"1000\non-docker\n"`) {
		t.Fatalf("run_shell_command in the docker sandbox: %d %s", status, out)
	}
	found := false
	for _, c := range dockerContainers(t, api, d.dataDir) {
		found = found || strings.HasSuffix(c, " running")
	}
	if !found {
		t.Fatal("no running container for the agentscope sandbox")
	}
	if status, body := asCall(t, d, "release", asToken, map[string]any{"identity": id}); status != 200 {
		t.Fatalf("release: %d %v", status, body)
	}
}
