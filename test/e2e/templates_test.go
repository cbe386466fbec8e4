package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Image templates end to end, through a real daemon: pulled from a
// registry with token auth, imported from the real Docker engine's
// `docker save`, exported back to it, snapshots, automatic pulls and
// agentscope sandbox types mapped to stored templates.

// sbExec runs script with /bin/sh -c in sandbox id (buffered JSON form)
// and returns its stdout, failing the test unless it exits 0.
func sbExec(t *testing.T, d *daemon, key, id, script string, extra ...any) string {
	t.Helper()
	body := map[string]any{"cmd": []string{"/bin/sh", "-c", script}}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, body, "Accept", "application/json")
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	if err := json.Unmarshal(data, &res); err != nil || status != 200 || res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: %d %s", script, id, status, data)
	}
	return res.Stdout
}

// createFrom creates a sandbox of template as key's user and returns its id.
func createFrom(t *testing.T, d *daemon, key, template string) string {
	t.Helper()
	status, data := d.call(t, "POST", "/v1/sandboxes", key, map[string]any{"template": template})
	if status != 201 && status != 200 {
		t.Fatalf("create from %q: %d %s", template, status, data)
	}
	id, _ := mustJSON(t, data)["id"].(string)
	return id
}

func deleteSandbox(t *testing.T, d *daemon, key, id string) {
	t.Helper()
	if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+id, key, nil); status >= 300 {
		t.Errorf("delete sandbox %s: %d %s", id, status, data)
	}
}

// cli runs the agentbox CLI against d as key's user.
func cli(t *testing.T, d *daemon, key string, args ...string) string {
	t.Helper()
	bin, _ := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agentbox %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// getTemplate returns the API's record of template name.
func getTemplate(t *testing.T, d *daemon, key, name string) map[string]any {
	t.Helper()
	status, data := d.call(t, "GET", "/v1/templates/"+url.PathEscape(name), key, nil)
	if status != 200 {
		t.Fatalf("GET template %s: %d %s", name, status, data)
	}
	return mustJSON(t, data)
}

// listTemplates is GET /v1/templates.
func listTemplates(t *testing.T, d *daemon, key string) []map[string]any {
	t.Helper()
	status, data := d.call(t, "GET", "/v1/templates", key, nil)
	var list struct {
		Templates []map[string]any `json:"templates"`
	}
	if status != 200 || json.Unmarshal(data, &list) != nil {
		t.Fatalf("list templates: %d %s", status, data)
	}
	return list.Templates
}

// layerDirs are the store's directories of template name's layers.
func layerDirs(t *testing.T, d *daemon, key, name string) []string {
	t.Helper()
	var dirs []string
	for _, l := range getTemplate(t, d, key, name)["layers"].([]any) {
		id := l.(map[string]any)["diff_id"].(string)
		dirs = append(dirs, filepath.Join(d.dataDir, "templates", "layers", strings.TrimPrefix(id, "sha256:")))
	}
	return dirs
}

// checkImageSandbox checks that sandbox id runs the test image as the
// image says: its user, working dir and env, its files with the image's
// own owners (not the host's, not the overflow id).
func checkImageSandbox(t *testing.T, d *daemon, key, id, envValue string) {
	t.Helper()
	got := sbExec(t, d, key, id, `id -u; id -g; pwd; echo "$`+imageEnvVar+`"; cat /etc/image-marker /srv/app/readme`)
	want := fmt.Sprintf("1001\n1001\n/srv/app\n%s\nfrom the image\nimage readme\n", envValue)
	if got != want {
		t.Errorf("image sandbox: %q, want %q", got, want)
	}
	// ls -n: the image's numeric ids, as the image's tar gave them.
	owners := map[string]string{}
	for _, dir := range []string{"/", "/srv", "/opt", "/home"} {
		for _, line := range strings.Split(sbExec(t, d, key, id, "ls -n "+dir), "\n") {
			f := strings.Fields(line)
			if len(f) >= 9 {
				owners[filepath.Join(dir, f[8])] = f[2] + ":" + f[3]
			}
		}
	}
	for p, want := range map[string]string{"/usr": "0:0", "/etc": "0:0", "/srv": "0:0", "/srv/app": "1001:1001",
		"/opt/owned": "42:43", "/home/app": "1001:1001"} {
		if owners[p] != want {
			t.Errorf("ls -n: %s owned by %q, want the image's %s (all: %v)", p, owners[p], want, owners)
		}
	}
}

// TestTemplatePullRegistry: `agentbox template pull` and POST
// /v1/templates/pulls from a registry with token auth (credentials from
// AGENTBOX_REGISTRY_AUTH); sandboxes of the pulled template run with the
// image's env, user, working dir and ids; what one sandbox writes reaches
// neither another sandbox nor the template's layer directories.
func TestTemplatePullRegistry(t *testing.T) {
	tr := newTokenRegistry(t)
	md := tr.push(t, "team/app:v1", runnableImage(t, "pulled"))
	d := startDaemon(t, tr.authSetting())
	ref := tr.host + "/team/app:v1"

	out := cli(t, d, "", "template", "pull", ref, "-t", "app:v1")
	if !strings.Contains(out, "app") {
		t.Errorf("template pull output: %q", out)
	}
	rec := getTemplate(t, d, "", "app:v1")
	if rec["kind"] != "image" || rec["source"] != tr.host+"/team/app@"+md.String() || len(rec["layers"].([]any)) != 2 {
		t.Fatalf("pulled template: %v, want an image pinned at %s with 2 layers", rec, md)
	}
	if tr.tokensIssued() == 0 {
		t.Error("the registry issued no token: token auth was not exercised")
	}
	tr.takeBlobGets()

	// The same image through the API, under another name: no layer is
	// downloaded again (at most the image config).
	status, data := d.call(t, "POST", "/v1/templates/pulls", "", map[string]any{"image": ref, "name": "app-api:v1"})
	if status != 200 && status != 201 {
		t.Fatalf("API pull: %d %s", status, data)
	}
	if got := mustJSON(t, data); got["digest"] != rec["digest"] {
		t.Errorf("API pull digest %v, want %v", got["digest"], rec["digest"])
	}
	if n := tr.takeBlobGets(); n > 1 {
		t.Errorf("second pull of a stored image downloaded %d blobs", n)
	}

	layers := layerDirs(t, d, "", "app:v1")
	before := map[string]map[string]string{}
	for _, l := range layers {
		before[l] = treeState(t, l)
	}
	a, b := createFrom(t, d, "", "app:v1"), createFrom(t, d, "", "app-api:v1")
	checkImageSandbox(t, d, "", a, "pulled")
	checkImageSandbox(t, d, "", b, "pulled")
	// A writes, deletes and changes the image's files, as the image's user.
	sbExec(t, d, "", a, `echo a > /srv/app/from-a && rm /srv/app/keep && echo changed > /srv/app/readme && echo a > /workspace/a && mkdir /home/app/dir`)
	if got := sbExec(t, d, "", a, `cat /srv/app/from-a /srv/app/readme; ls /srv/app`); got != "a\nchanged\nfrom-a\nreadme\n" {
		t.Errorf("sandbox A after its writes: %q", got)
	}
	if got := sbExec(t, d, "", b, `ls /srv/app /workspace /home/app; cat /srv/app/readme`); got != "/home/app:\n\n/srv/app:\nkeep\nreadme\n\n/workspace:\nimage readme\n" {
		t.Errorf("sandbox B sees A's writes: %q", got)
	}
	c := createFrom(t, d, "", "app:v1")
	if got := sbExec(t, d, "", c, `ls /srv/app; cat /srv/app/readme`); got != "keep\nreadme\nimage readme\n" {
		t.Errorf("a new sandbox of the template sees A's writes: %q", got)
	}
	for _, l := range layers {
		if diff := diffTrees(before[l], treeState(t, l)); len(diff) > 0 {
			t.Errorf("layer %s changed: %v", filepath.Base(l), diff)
		}
	}
	// in_use counts the sandboxes of the image: both names are one image.
	inUse := map[string]float64{}
	for _, l := range listTemplates(t, d, "") {
		inUse[fmt.Sprintf("%v:%v", l["name"], l["tag"])] = l["in_use"].(float64)
	}
	if inUse["app:v1"] != 3 || inUse["app-api:v1"] != 3 {
		t.Errorf("in_use counts %v, want 3 for both names of the image", inUse)
	}
	for _, id := range []string{a, b, c} {
		deleteSandbox(t, d, "", id)
	}
}

// requireDocker skips unless a Docker engine answers (scripts/start-docker.sh
// starts Debian's docker.io for `make test`).
func requireDocker(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("needs the docker CLI and engine (docker.io; scripts/start-docker.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine: %v %s", err, tail(string(out), 3))
	}
}

// dockerCmd runs docker with args and returns its output.
func dockerCmd(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestTemplateDockerImportExport: a `docker save` tarball of an image the
// real Docker engine made (docker import of a root filesystem, offline) is
// imported with `agentbox template import`; its sandboxes see the same
// files, ids, env, user and working dir; `agentbox template export` gives
// a tarball `docker load` takes back as the very same image, and so does
// the export of a snapshot of it (whose layer blob the export writes).
func TestTemplateDockerImportExport(t *testing.T) {
	requireDocker(t)
	d := startDaemon(t)
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(rootfs, imageRootfsTar(t), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("agentbox-e2e-import:%d", time.Now().UnixNano())
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	cfg := testImageConfig("docker")
	args := []string{"import"}
	for _, e := range cfg.Env {
		args = append(args, "--change", "ENV "+strings.Replace(e, "=", " ", 1))
	}
	args = append(args, "--change", "WORKDIR "+cfg.WorkingDir, "--change", "USER "+cfg.User, rootfs, tag)
	imageID := dockerCmd(t, args...)
	saved := filepath.Join(dir, "saved.tar")
	dockerCmd(t, "save", "-o", saved, tag)

	cli(t, d, "", "template", "import", saved, "-t", "dimg:1")
	rec := getTemplate(t, d, "", "dimg:1")
	if rec["digest"] != imageID {
		t.Errorf("imported digest %v, want Docker's image id %s", rec["digest"], imageID)
	}
	a := createFrom(t, d, "", "dimg:1")
	checkImageSandbox(t, d, "", a, "docker")
	deleteSandbox(t, d, "", a)

	// Export, and Docker loads it back as the same image with the same files.
	exported := filepath.Join(dir, "exported.tar")
	cli(t, d, "", "template", "export", "dimg:1", "-o", exported)
	dockerCmd(t, "rmi", tag)
	loaded := dockerCmd(t, "load", "-i", exported)
	// "Loaded image: NAME:TAG" (the export names the template), or the id.
	name := imageID
	if _, after, ok := strings.Cut(loaded, "Loaded image: "); ok {
		name = strings.TrimSpace(strings.SplitN(after, "\n", 2)[0])
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", name).Run() })
	if got := dockerCmd(t, "image", "inspect", "--format", "{{.Id}} {{.Config.User}} {{.Config.WorkingDir}}", name); got != imageID+" app /srv/app" {
		t.Errorf("docker load of the export: %q, want %q", got, imageID+" app /srv/app")
	}
	ctr := dockerCmd(t, "create", name, "/bin/true")
	defer exec.Command("docker", "rm", "-f", ctr).Run()
	dockerCmd(t, "cp", ctr+":/srv/app/readme", dir)
	if got, err := os.ReadFile(filepath.Join(dir, "readme")); err != nil || string(got) != "image readme\n" {
		t.Errorf("the loaded image's /srv/app/readme: %q %v", got, err)
	}

	// A snapshot's layer is stored without a blob: its export writes one
	// from the layer's files, and Docker loads it as the same image.
	sb := createFrom(t, d, "", "dimg:1")
	sbExec(t, d, "", sb, `echo from the snapshot > /srv/app/snap.txt && rm /srv/app/readme`)
	cli(t, d, "", "snapshot", sb, "-t", "dsnap:1")
	deleteSandbox(t, d, "", sb)
	snapID, _ := getTemplate(t, d, "", "dsnap:1")["digest"].(string)
	snapTar := filepath.Join(dir, "snap.tar")
	cli(t, d, "", "template", "export", "dsnap:1", "-o", snapTar)
	loaded = dockerCmd(t, "load", "-i", snapTar)
	name = snapID
	if _, after, ok := strings.Cut(loaded, "Loaded image: "); ok {
		name = strings.TrimSpace(strings.SplitN(after, "\n", 2)[0])
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", name).Run() })
	if got := dockerCmd(t, "image", "inspect", "--format", "{{.Id}}", name); got != snapID {
		t.Errorf("docker load of the snapshot's export: image %q, want %q", got, snapID)
	}
	sctr := dockerCmd(t, "create", name, "/bin/true")
	defer exec.Command("docker", "rm", "-f", sctr).Run()
	dockerCmd(t, "cp", sctr+":/srv/app/snap.txt", dir)
	if got, err := os.ReadFile(filepath.Join(dir, "snap.txt")); err != nil || string(got) != "from the snapshot\n" {
		t.Errorf("the loaded snapshot's /srv/app/snap.txt: %q %v", got, err)
	}
	if out, err := exec.Command("docker", "cp", sctr+":/srv/app/readme", filepath.Join(dir, "gone")).CombinedOutput(); err == nil {
		t.Errorf("the loaded snapshot still has the file it deleted: %s", out)
	}
}

// TestTemplateSnapshot: a snapshot (API and `agentbox snapshot`) of an
// image sandbox is exactly what the sandbox made of its root filesystem;
// the sandbox goes on; another tenant can neither snapshot it nor delete
// templates; a template in use cannot be deleted, and once deleted its
// unique layers are collected.
func TestTemplateSnapshot(t *testing.T) {
	const alice, bob = "alice-key-snap", "bob-key-snap"
	tr := newTokenRegistry(t)
	tr.push(t, "team/snap:v1", runnableImage(t, "snap-base"))
	d := startDaemon(t, tr.authSetting(), "API_KEYS="+alice+":alice,"+bob+":bob", "TEMPLATE_ADMIN_USERS=alice")
	if status, data := d.call(t, "POST", "/v1/templates/pulls", alice, map[string]any{"image": tr.host + "/team/snap:v1", "name": "base-img"}); status/100 != 2 {
		t.Fatalf("pull: %d %s", status, data)
	}
	src := createFrom(t, d, alice, "base-img")
	// 4 MiB that only the snapshot holds, so that collecting it shows on disk.
	big := strings.Repeat("0123456789abcdef", 4<<20/16)
	sbExec(t, d, alice, src, `cat > /srv/app/big && echo snap > /srv/app/new.txt && rm /srv/app/readme && mkdir -p /srv/app/d/e && echo ws > /workspace/ws`, "stdin", big)

	status, data := d.call(t, "POST", "/v1/sandboxes/"+src+"/snapshot", bob, map[string]any{"name": "bob-snap"})
	if status != 404 {
		t.Errorf("bob snapshots alice's sandbox: %d %s, want 404", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+src+"/snapshot", alice, map[string]any{"name": "snap:1"})
	if status != 201 {
		t.Fatalf("snapshot: %d %s", status, data)
	}
	if !strings.Contains(cli(t, d, alice, "snapshot", src, "-t", "snap:2"), "snap:2") {
		t.Error("agentbox snapshot did not name the new template")
	}
	// The original goes on, with its files.
	if got := sbExec(t, d, alice, src, `cat /srv/app/new.txt; echo more >> /srv/app/new.txt; cat /srv/app/new.txt`); got != "snap\nsnap\nmore\n" {
		t.Errorf("the snapshotted sandbox after the snapshot: %q", got)
	}
	n := createFrom(t, d, alice, "snap:1")
	got := sbExec(t, d, alice, n, `ls /srv/app /workspace; cat /srv/app/new.txt /srv/app/keep; stat -c '%u:%g %s' /srv/app/new.txt /srv/app/big; id -u; pwd; echo "$`+imageEnvVar+`"`)
	want := fmt.Sprintf("/srv/app:\nbig\nd\nkeep\nnew.txt\n\n/workspace:\nsnap\nkept\n1001:1001 5\n1001:1001 %d\n1001\n/srv/app\nsnap-base\n", len(big))
	if got != want {
		t.Errorf("sandbox of the snapshot:\n got %q\nwant %q", got, want)
	}

	// Templates: bob may not delete; in use is 409; then it goes, and GC
	// frees its own layer but keeps the base's.
	if status, data := d.call(t, "DELETE", "/v1/templates/snap:1", bob, nil); status != 403 {
		t.Errorf("bob deletes a template: %d %s, want 403", status, data)
	}
	if status, data := d.call(t, "DELETE", "/v1/templates/snap:1", alice, nil); status != 409 {
		t.Errorf("delete a template in use: %d %s, want 409", status, data)
	}
	snapLayers, baseLayers := layerDirs(t, d, alice, "snap:1"), layerDirs(t, d, alice, "base-img")
	top := snapLayers[len(snapLayers)-1]
	deleteSandbox(t, d, alice, n)
	cli(t, d, alice, "template", "rm", "snap:2") // the same layer: it must go too before the layer can
	store := filepath.Join(d.dataDir, "templates")
	duBefore := duBytes(t, store)
	if status, data := d.call(t, "DELETE", "/v1/templates/snap:1", alice, nil); status/100 != 2 {
		t.Fatalf("delete an unused template: %d %s", status, data)
	}
	duAfter := duBytes(t, store)
	if _, err := os.Stat(top); !os.IsNotExist(err) {
		t.Errorf("the snapshot's layer %s survived GC: %v", top, err)
	}
	for _, l := range baseLayers {
		if _, err := os.Stat(l); err != nil {
			t.Errorf("the base's layer was collected: %v", err)
		}
	}
	if duBefore-duAfter < int64(len(big)) {
		t.Errorf("store used %d bytes before the delete and %d after: the snapshot's %d bytes were not freed", duBefore, duAfter, len(big))
	}
	t.Logf("store: %d bytes before deleting the snapshot, %d after", duBefore, duAfter)
	if got := sbExec(t, d, alice, src, `cat /srv/app/new.txt`); got != "snap\nmore\n" {
		t.Errorf("the original sandbox after the snapshot was deleted: %q", got)
	}
	deleteSandbox(t, d, alice, src)
}

// TestTemplateAutoPullAndAgentscope: with TEMPLATE_AUTO_PULL a create
// naming an image reference pulls it first; an agentscope sandbox type
// mapped to a stored template in SANDBOX_TEMPLATES creates from it.
func TestTemplateAutoPullAndAgentscope(t *testing.T) {
	tr := newTokenRegistry(t)
	tr.push(t, "team/auto:v1", runnableImage(t, "auto"))
	tr.push(t, "team/typed:v1", runnableImage(t, "typed"))
	types, _ := json.Marshal(map[string]string{"base": "host", "custom": "typed:v1"})
	d := startDaemon(t, tr.authSetting(), "TEMPLATE_AUTO_PULL=true", "BEARER_TOKEN="+asToken, "SANDBOX_TEMPLATES="+string(types))

	ref := tr.host + "/team/auto:v1"
	if status, data := d.call(t, "GET", "/v1/templates/"+url.PathEscape(ref), asToken, nil); status != 404 || mustJSON(t, data)["code"] != "not_found" || strings.Contains(string(data), "no route") {
		t.Fatalf("template before the first create: %d %s, want 404", status, data)
	}
	id := createFrom(t, d, asToken, ref)
	checkImageSandbox(t, d, asToken, id, "auto")
	if rec := getTemplate(t, d, asToken, ref); rec["kind"] != "image" || !strings.HasPrefix(rec["source"].(string), tr.host+"/team/auto@sha256:") {
		t.Errorf("auto-pulled template: %v", rec)
	}
	deleteSandbox(t, d, asToken, id)

	if status, data := d.call(t, "POST", "/v1/templates/pulls", asToken, map[string]any{"image": tr.host + "/team/typed:v1", "name": "typed:v1"}); status/100 != 2 {
		t.Fatalf("pull: %d %s", status, data)
	}
	status, body := asCall(t, d, "create", asToken, map[string]any{"sandbox_type": "custom"})
	asID, _ := body["data"].(string)
	if status != 200 || asID == "" {
		t.Fatalf("agentscope create of type custom: %d %v", status, body)
	}
	// agentscope's shell tool runs in /workspace, writable by the image's user;
	// the image has no git, which costs the sandbox only its git watcher.
	status, body = asCall(t, d, "call_tool", asToken, map[string]any{"identity": asID, "tool_name": "run_shell_command",
		"arguments": map[string]any{"command": `cat /etc/image-name; echo "$` + imageEnvVar + `"; id -u; pwd; echo w > w`}})
	content, _ := json.Marshal(body["data"])
	if status != 200 || !strings.Contains(string(content), `"text":"typed\ntyped\n1001\n/workspace\n"`) {
		t.Errorf("agentscope sandbox of type custom: %d %s", status, content)
	}
	if status, body = asCall(t, d, "release", asToken, map[string]any{"identity": asID}); status != 200 || body["data"] != true {
		t.Errorf("release: %d %v", status, body)
	}
	var names []string
	for _, l := range listTemplates(t, d, asToken) {
		names = append(names, fmt.Sprintf("%v:%v", l["name"], l["tag"]))
	}
	sort.Strings(names)
	if want := []string{ref, "host:latest", "typed:v1"}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("templates %v, want %v", names, want)
	}
}
