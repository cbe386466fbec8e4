package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// The packages `make run` installs on a fresh Debian (scripts/install-deps.sh
// run) that a bootstrapped debian:bookworm lacks; e2fsprogs it has.
var makeRunPackages = []string{"build-essential", "pkg-config", "libseccomp-dev"}

// freshDebian returns a fresh root filesystem of debian:bookworm, from the
// bootstrap in the test cache (the templates' one, made by agentbox
// template bootstrap from the host's apt), and that tar's name.
func freshDebian(t *testing.T) (root, tarball string) {
	t.Helper()
	testutil.RequireRoot(t)
	cache := os.Getenv("AGENTBOX_TEST_CACHE")
	if cache == "" {
		home, _ := os.UserCacheDir()
		cache = filepath.Join(home, "agentbox-test")
	}
	tars, _ := filepath.Glob(filepath.Join(cache, "bootstrap", "debian-bookworm-*.tar"))
	if len(tars) == 0 {
		t.Skipf("no debian:bookworm bootstrap in %s/bootstrap (TestBuiltinTemplates makes it)", cache)
	}
	root = filepath.Join(testutil.ShortTempDir(t), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", tars[0], "-C", root, "--numeric-owner").CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", tars[0], err, out)
	}
	return root, tars[0]
}

// inRoot runs script with sh in root (chroot), as user ("" = root), in
// mount and network namespaces of its own: binds (host path -> path in
// root, read-only) and /proc exist only there and go with it, and nothing
// reaches the network unless net is true. It returns the output.
func inRoot(t *testing.T, root string, binds map[string]string, net bool, user string, env []string, script string) (string, error) {
	t.Helper()
	var setup strings.Builder
	setup.WriteString("set -e\nmount --make-rprivate /\nmount -t proc proc \"$R/proc\"\nmount --bind /dev/null \"$R/dev/null\"\n")
	for src, dst := range binds {
		setup.WriteString("mkdir -p \"$R" + dst + "\"\nmount --bind '" + src + "' \"$R" + dst + "\"\nmount -o remount,bind,ro \"$R" + dst + "\"\n")
	}
	userspec := ""
	if user != "" {
		userspec = "--userspec=" + user + " "
	}
	setup.WriteString("exec env -i " + strings.Join(env, " ") + " chroot " + userspec + "\"$R\" /bin/sh -c \"$S\"\n")
	args := []string{"--mount", "--fork"}
	if !net {
		args = append(args, "--net")
	}
	// A cold build of the daemon on a loaded two-core machine takes about
	// twenty minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", append(args, "sh", "-c", setup.String())...)
	cmd.Env = append(os.Environ(), "R="+root, "S="+script)
	cmd.WaitDelay = 10 * time.Second // a child left holding the output
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// localDebs returns a directory of the .deb files makeRunPackages need on
// the bootstrap tarball (their whole closure) with its Packages index: a
// local apt source. It is made once into the test cache, downloaded by
// apt in a copy of that root filesystem from the Debian sources the
// bootstrap lists (the host's), like the bootstrap itself.
func localDebs(t *testing.T, tarball string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(filepath.Base(tarball) + "\n" + strings.Join(makeRunPackages, " ")))
	dir := filepath.Join(filepath.Dir(filepath.Dir(tarball)), "fresh-debs", hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "Packages")); err == nil {
		return dir
	}
	root, _ := freshDebian(t)
	if err := copyFile("/etc/resolv.conf", filepath.Join(root, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	out, err := inRoot(t, root, nil, true, "", []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive"},
		"apt-get update -qq && apt-get install -y -qq --download-only --no-install-recommends "+strings.Join(makeRunPackages, " "))
	if err != nil {
		t.Skipf("cannot download %v through the bootstrap's Debian sources (no mirror reachable?): %v\n%s", makeRunPackages, err, lastLines(out, 20))
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		if err := os.Rename(d, filepath.Join(tmp, filepath.Base(d))); err != nil {
			t.Fatal(err)
		}
	}
	scan := exec.Command("dpkg-scanpackages", "--multiversion", ".")
	scan.Dir = tmp
	index, err := scan.Output()
	if err != nil || len(debs) == 0 {
		t.Fatalf("index %d debs: %v", len(debs), err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "Packages"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	os.Remove(dst) // a symlink in the root filesystem is replaced, not followed
	return os.WriteFile(dst, b, 0o644)
}

// freshCheckout is a fresh debian:bookworm whose only apt source is the
// local one (localDebs, at /debs) with this checkout cloned to /src.
func freshCheckout(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("dpkg-scanpackages"); err != nil {
		t.Skip("needs dpkg-scanpackages (apt-get install dpkg-dev)")
	}
	root, tarball := freshDebian(t)
	debs := localDebs(t, tarball)
	if err := os.Remove(filepath.Join(root, "etc/apt/sources.list")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/apt/sources.list.d/local.list"), []byte("deb [trusted=yes] file:/debs ./\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "debs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Bound read-only at /debs by each inRoot of the caller; copied here so
	// that the root is self-contained.
	if out, err := exec.Command("cp", "-a", debs+"/.", filepath.Join(root, "debs")).CombinedOutput(); err != nil {
		t.Fatalf("copy debs: %v\n%s", err, out)
	}
	src, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "clone", "-q", src, filepath.Join(root, "src")).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	return root
}

// TestMakeRunDepsFreshDebian: on a fresh Debian without the build
// dependencies, make run's dependency step (scripts/install-deps.sh run)
// names what to install and stops as another user, and as root installs
// exactly those from the local apt source with no network at all, after
// which libseccomp builds (pkg-config finds it, gcc links a static binary).
func TestMakeRunDepsFreshDebian(t *testing.T) {
	root := freshCheckout(t)
	// Go, as the checkout's README asks for, from this host (read only).
	goroot := strings.TrimSpace(goEnv(t, "GOROOT"))
	binds := map[string]string{goroot: "/usr/local/go"}
	env := []string{"PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "INSTALL_DEPS_NODE=0"}
	for _, p := range makeRunPackages {
		if out, err := inRoot(t, root, binds, false, "", env, "dpkg-query -W -f='${Status}' "+p+" 2>/dev/null | grep -q 'install ok installed'"); err == nil {
			t.Fatalf("the fresh root already has %s: %s", p, out)
		}
	}
	out, err := inRoot(t, root, binds, false, "65534:65534", env, "cd /src && ./scripts/install-deps.sh run")
	if err == nil || !strings.Contains(out, "install-deps: missing packages: "+strings.Join(makeRunPackages, " ")) ||
		!strings.Contains(out, "sudo apt-get install "+strings.Join(makeRunPackages, " ")) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	start := time.Now()
	out, err = inRoot(t, root, binds, false, "", env, "cd /src && ./scripts/install-deps.sh run")
	if err != nil || !strings.Contains(out, "install-deps: installing "+strings.Join(makeRunPackages, " ")) {
		t.Fatalf("as root: %v\n%s", err, out)
	}
	t.Logf("dependency step as root, offline: %s", time.Since(start).Round(time.Millisecond))
	out, err = inRoot(t, root, binds, false, "", env, "pkg-config --modversion libseccomp && cd /src && cc -static -O2 -o /tmp/shim cmd/agentbox-shim/shim.c && ./scripts/install-deps.sh run && echo again-ok")
	if err != nil || !strings.Contains(out, "again-ok") || strings.Contains(out, "installing") {
		t.Fatalf("after the step: %v\n%s", err, out)
	}
	if os.Getenv("AGENTBOX_FRESH_BUILD") == "" {
		return
	}
	// make test-fresh: the build too, with this Go and module cache (read
	// only, no proxy), without the console (it needs the npm registry).
	modcache := strings.TrimSpace(goEnv(t, "GOMODCACHE"))
	start = time.Now()
	out, err = inRoot(t, root, map[string]string{goroot: "/usr/local/go", modcache: "/gomod"}, false, "",
		[]string{"PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "GOMODCACHE=/gomod", "GOPROXY=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOTELEMETRY=off", "GOCACHE=/root/.cache/go-build"},
		"cd /src && make agent init shim && CGO_ENABLED=1 go build -tags nokube -o bin/agentbox ./cmd/agentbox && bin/agentbox version")
	if err != nil || !strings.Contains(out, "native") {
		t.Fatalf("build in the fresh root: %v\n%s", err, lastLines(out, 40))
	}
	t.Logf("build in the fresh root (agent, init, shim, daemon; cold cache): %s", time.Since(start).Round(time.Second))
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
