package packaging

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needDocker skips without root, a Docker engine or mmdebstrap (the
// image's base is bootstrapped), unless AGENTBOX_REQUIRE_DOCKER is set
// (scripts/test.sh sets it where it started an engine): then it fails.
func needDocker(t *testing.T) {
	t.Helper()
	skip := t.Skip
	if os.Getenv("AGENTBOX_REQUIRE_DOCKER") != "" {
		skip = t.Fatal
	}
	if os.Geteuid() != 0 {
		skip("needs root (the image's base is bootstrapped with mmdebstrap)")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		skip("needs a Docker engine (scripts/start-docker.sh): ", err)
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		skip("needs mmdebstrap to bootstrap the image's base")
	}
	if _, err := os.Stat("/etc/debian_version"); err != nil {
		skip("the image is bootstrapped from a Debian host's apt sources")
	}
}

// testImage builds the image with scripts/image.sh (what `make image` runs)
// once per content: its tag is a hash of every file that goes into it and
// of its templates' digests, and an image with that tag is used as it is.
// The base's bootstrap is cached in $AGENTBOX_TEST_CACHE/bootstrap like the
// other tests' bootstraps; the templates it ships come from the test
// cache's template store (TestBuiltinTemplates', built there first when it
// lacks them), under the lock every test takes to open it.
func testImage(t *testing.T, bin string) string {
	t.Helper()
	root := repoRoot(t)
	cache := os.Getenv("AGENTBOX_TEST_CACHE")
	if cache == "" {
		cache = filepath.Join(os.TempDir(), "agentbox-test-cache")
	}
	store := filepath.Join(cache, "templates")
	unlock := lockFile(t, store+".lock", 40*time.Minute)
	defer unlock() // the image holds a copy: the store is free again
	digests := run(t, root, nil, "go", "run", "./tools/imagetemplates", "-store", store, "-bin", filepath.Join(bin, "agentbox"), "base", "code-interpreter")
	h := sha256.New()
	fmt.Fprintf(h, "templates\n%s", digests)
	for _, f := range []string{
		filepath.Join(root, "tools", "imagetemplates", "main.go"),
		filepath.Join(root, "internal", "template", "seed.go"),
		filepath.Join(bin, "agentbox"), filepath.Join(bin, "agentbox-agent"),
		filepath.Join(bin, "agentbox-init"), filepath.Join(bin, "agentbox-shim"),
		filepath.Join(root, "deploy", "docker", "Dockerfile"),
		filepath.Join(root, "deploy", "docker", "entrypoint.sh"),
		filepath.Join(root, "scripts", "image.sh"),
	} {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\n", filepath.Base(f))
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	tag := "agentbox-test-image:" + hex.EncodeToString(h.Sum(nil))[:16]
	if exec.Command("docker", "image", "inspect", tag).Run() == nil {
		return tag
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join(root, "scripts", "image.sh"), tag, cache)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=test", "IMAGE_TEMPLATES="+store)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	t.Logf("built %s in %s", tag, time.Since(start).Round(time.Second))
	// Older test images go: one is kept.
	old, _ := exec.Command("docker", "images", "agentbox-test-image", "--format", "{{.Repository}}:{{.Tag}}").Output()
	for _, o := range strings.Fields(string(old)) {
		if o != tag {
			_ = exec.Command("docker", "rmi", o).Run()
		}
	}
	return tag
}

// TestImage: the image of `make image`, run with exactly the privileges
// of deploy/compose/agentbox.yaml (and its environment: an API key, so it
// serves on the container's address), serves with sandbox networking
// ready and the built-in templates it ships ready at its first start
// (nothing built); a sandbox is created in it and runs a command, a
// code-interpreter sandbox runs Python; a container restart (SIGTERM) destroys its sandboxes
// (AUTO_CLEANUP, docs/install.md) and serves again; a kill (SIGKILL, the
// sandboxes dying with the container's pid namespace) is followed by a
// start that drops the dead sandbox's record and creates new ones; and
// once the container is removed, none of its cgroups is left on the host.
func TestImage(t *testing.T) {
	needDocker(t)
	bin := binDir(t)
	image := testImage(t, bin)
	root := repoRoot(t)

	one := readCompose(t, "agentbox.yaml", map[string]string{"API_KEYS": "k1:alice"})
	svc := one.Services["agentbox"]
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "agentbox-test-" + hex.EncodeToString(b[:])
	volume := name + "-data"
	t.Cleanup(func() {
		_ = exec.Command("docker", "rm", "-f", "-v", name).Run()
		_ = exec.Command("docker", "volume", "rm", "-f", volume).Run()
	})
	args := append([]string{"run", "-d", "--name", name, "-p", "127.0.0.1::8000", "-v", volume + ":/var/lib/agentbox"},
		dockerRunArgs(t, svc, filepath.Join(root, "deploy", "compose"))...)
	args = append(args, image)
	args = append(args, svc.Command...)
	started := time.Now()
	cid := strings.TrimSpace(run(t, root, nil, "docker", args...))

	// The published port: Docker picks another one at each start.
	var url string
	ready := func() {
		t.Helper()
		addr, _, _ := strings.Cut(strings.TrimSpace(run(t, root, nil, "docker", "port", name, "8000/tcp")), "\n")
		url = "http://" + addr
		waitReady(t, name, url)
	}
	cli := func(args ...string) string {
		t.Helper()
		return run(t, root, []string{"AGENTBOX_URL=" + url, "AGENTBOX_API_KEY=k1"}, filepath.Join(bin, "agentbox"), args...)
	}
	ready()
	t.Logf("first start (the templates unpacked) to ready: %s", time.Since(started).Round(100*time.Millisecond))
	// NETWORK=auto falls back to loopback-only sandboxes with a warning
	// when the container cannot make the bridge (no NET_ADMIN).
	if logs := containerLogs(t, name); !strings.Contains(logs, `msg="sandbox network ready"`) {
		t.Errorf("sandbox networking is not ready in the container:\n%s", logs)
	}

	if v := run(t, root, nil, "docker", "exec", name, "agentbox", "version"); !strings.Contains(v, "native") {
		t.Errorf("agentbox version in the image: %q, want the native backend named", v)
	}
	id := strings.TrimSpace(cli("create"))
	if out := cli("exec", id, "--", "sh", "-c", "echo hello from $(id -un)"); !strings.Contains(out, "hello from user") {
		t.Fatalf("exec in the image's sandbox: %q", out)
	}

	// The templates the image ships are there at the first start: listed
	// ready, a code-interpreter sandbox made at once, nothing built.
	ls := cli("template", "ls")
	for _, n := range []string{"base", "code-interpreter"} {
		if !regexp.MustCompile(`(?m)^` + n + `\s`).MatchString(ls) {
			t.Errorf("template ls in a new container does not list %s as stored:\n%s", n, ls)
		}
	}
	ci := strings.TrimSpace(cli("create", "--template", "code-interpreter"))
	if out := cli("exec", ci, "--", "python3", "-c", "import sys; print('py', sys.version_info[0] * 14)"); strings.TrimSpace(out) != "py 42" {
		t.Fatalf("python in the image's code-interpreter sandbox: %q", out)
	}
	if logs := containerLogs(t, name); strings.Count(logs, "unpacking the image's built-in templates") != 1 ||
		strings.Contains(logs, `template=base`) && strings.Contains(logs, "building a built-in template in the background") {
		t.Errorf("the first start did not unpack the image's templates once, or built base:\n%s", logs)
	}

	// A restart: SIGTERM, the daemon destroys its sandboxes, then serves.
	run(t, root, nil, "docker", "restart", name)
	ready()
	if ls := cli("ls"); strings.Contains(ls, id) {
		t.Errorf("after a restart the sandbox is still listed:\n%s", ls)
	}
	if logs := containerLogs(t, name); !strings.Contains(logs, `msg="sandbox destroyed" component=manager sandbox=`+id+` reason="server shutdown"`) {
		t.Errorf("the daemon's log does not say the sandbox was destroyed at shutdown:\n%s", logs)
	}

	// A kill: no shutdown; the next start drops the dead sandbox's record.
	id2 := strings.TrimSpace(cli("create"))
	cli("exec", id2, "--", "true")
	run(t, root, nil, "docker", "kill", name)
	run(t, root, nil, "docker", "start", name)
	ready()
	if ls := cli("ls"); strings.Contains(ls, id2) {
		t.Errorf("after a kill and a start the dead sandbox is still listed:\n%s", ls)
	}
	if logs := containerLogs(t, name); !strings.Contains(logs, `sandbox=`+id2) || !strings.Contains(logs, "dropping record of a sandbox the backend no longer has") {
		t.Errorf("the daemon's log does not say it dropped %s's record:\n%s", id2, logs)
	}
	id3 := strings.TrimSpace(cli("create", "--template", "code-interpreter"))
	if out := cli("exec", id3, "--", "python3", "-c", "print('again')"); strings.TrimSpace(out) != "again" {
		t.Fatalf("exec after the kill: %q", out)
	}
	// The seed is unpacked into an empty store only: the restarts kept
	// the volume's.
	if n := strings.Count(containerLogs(t, name), "unpacking the image's built-in templates"); n != 1 {
		t.Errorf("the image's templates were unpacked %d times over three starts, want once", n)
	}

	run(t, root, nil, "docker", "rm", "-f", "-v", name)
	for _, dir := range cgroupMounts(t) {
		if _, err := os.Stat(filepath.Join(dir, "docker", cid)); err == nil {
			t.Errorf("the container's cgroup %s is left after its removal", filepath.Join(dir, "docker", cid))
		}
	}
}

// waitReady waits (up to 2 minutes, twice a second) for the daemon's
// /readyz, failing with the container's log.
func waitReady(t *testing.T, name, url string) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	for i := 0; i < 240; i++ {
		if resp, err := c.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if out, _ := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", name).Output(); strings.TrimSpace(string(out)) == "false" {
			t.Fatalf("%s exited:\n%s", name, containerLogs(t, name))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s did not get ready:\n%s", name, containerLogs(t, name))
}

func containerLogs(t *testing.T, name string) string {
	t.Helper()
	out, _ := exec.Command("docker", "logs", name).CombinedOutput()
	return string(out)
}

// cgroupMounts are the host's cgroup hierarchies.
func cgroupMounts(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") {
				dirs = append(dirs, fields[4])
			}
		}
	}
	return dirs
}

// lockFile takes an exclusive flock on path, waiting (once a second, up to
// wait) while another run holds it, and returns its release: the test
// cache's template store is opened by one process at a time (test/e2e
// lockCache takes the same lock).
func lockFile(t *testing.T, path string, wait time.Duration) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() } // drops the flock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("lock %s: %v", path, err)
		}
		time.Sleep(time.Second)
	}
}
