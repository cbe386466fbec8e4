package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/template/bootstrap"
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
		// Made once into the test cache (locked by the bootstrap package),
		// as the build tests do: the host's apt sources, through mmdebstrap.
		if _, err := exec.LookPath("mmdebstrap"); err != nil {
			t.Skip("needs mmdebstrap (apt-get install mmdebstrap) to bootstrap debian:bookworm")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		var log bytes.Buffer
		tar, err := bootstrap.Bootstrap(ctx, bootstrap.Options{Image: "debian:bookworm", CacheDir: filepath.Join(cache, "bootstrap")}, &log)
		if err != nil {
			t.Skipf("cannot bootstrap debian:bookworm on this host (no Debian mirror reachable?): %v\n%s", err, lastLines(log.String(), 20))
		}
		tars = []string{tar}
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
	return inRootWith(t, root, binds, net, false, user, env, script)
}

// inRootSys is inRoot for a daemon: the host's /dev and /sys (cgroups,
// loop devices) bound in, a pid namespace of its own (whatever is left
// running dies with it), and loopback up in its network namespace.
func inRootSys(t *testing.T, root string, binds map[string]string, user string, env []string, script string) (string, error) {
	t.Helper()
	return inRootWith(t, root, binds, false, true, user, env, script)
}

func inRootWith(t *testing.T, root string, binds map[string]string, net, sys bool, user string, env []string, script string) (string, error) {
	t.Helper()
	var setup strings.Builder
	setup.WriteString("set -e\nmount --make-rprivate /\n")
	if sys {
		// The root a daemon sees is a mount point, as on a machine: the
		// sandboxes' mount namespaces make it private and pivot from it.
		setup.WriteString("mount --rbind \"$R\" \"$R\"\nmount --make-rprivate \"$R\"\n")
	}
	setup.WriteString("mount -t proc proc \"$R/proc\"\n")
	if sys {
		setup.WriteString("mount --rbind /dev \"$R/dev\"\nmount --rbind /sys \"$R/sys\"\nip link set lo up\n")
	} else {
		setup.WriteString("mount --bind /dev/null \"$R/dev/null\"\n")
	}
	for src, dst := range binds {
		setup.WriteString("mkdir -p \"$R" + dst + "\"\nmount --bind '" + src + "' \"$R" + dst + "\"\nmount -o remount,bind,ro \"$R" + dst + "\"\n")
	}
	userspec := ""
	if user != "" {
		userspec = "--userspec=" + user + " "
	}
	if sys {
		// The root becomes the mount namespace's root (pivot_root, not
		// chroot): the kernel refuses a user namespace to a chrooted
		// process, and the daemon makes one for its sandboxes.
		setup.WriteString("cd \"$R\"\nmkdir -p .oldroot\npivot_root . .oldroot\ncd /\n/.oldroot/usr/bin/umount -l /.oldroot\n" +
			"exec /usr/bin/env -i " + strings.Join(env, " ") + " /bin/sh -c \"$S\"\n")
	} else {
		setup.WriteString("exec env -i " + strings.Join(env, " ") + " chroot " + userspec + "\"$R\" /bin/sh -c \"$S\"\n")
	}
	args := []string{"--mount", "--fork"}
	if sys {
		args = append(args, "--pid")
	}
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
func freshCheckout(t *testing.T) (string, time.Time) {
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
	cloned := time.Now()
	if out, err := exec.Command("git", "clone", "-q", src, filepath.Join(root, "src")).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	return root, cloned
}

// TestMakeRunDepsFreshDebian: on a fresh Debian without the build
// dependencies, make run's dependency step (scripts/install-deps.sh run)
// names what to install and stops as another user, and as root installs
// exactly those from the local apt source with no network at all, after
// which libseccomp builds (pkg-config finds it, gcc links a static binary).
func TestMakeRunDepsFreshDebian(t *testing.T) {
	root, cloned := freshCheckout(t)
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
	freshMakeRun(t, root, goroot, cloned)
}

// freshMakeRun is make test-fresh's part: the README's `make run` in the
// fresh root, as root, until /healthz answers, then the first sandbox
// (the banner's next command, on the host template: the built-in
// templates' bootstrap needs a Debian mirror, which this root cannot
// reach). No network: Go's modules come from this host's module cache
// (read only, no proxy), the console's npm packages from an npm cache
// made once into the test cache (npm ci, offline), Node.js from this host
// (the dependency step finds it and installs none).
func freshMakeRun(t *testing.T, root, goroot string, cloned time.Time) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("needs Node.js on this host (the console's build)")
	}
	npmDir := "/usr/lib/node_modules/npm"
	if _, err := os.Stat(filepath.Join(npmDir, "bin/npm-cli.js")); err != nil {
		t.Skipf("needs npm at %s: %v", npmDir, err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/local/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", node, filepath.Join(root, "usr/local/bin/node")).CombinedOutput(); err != nil {
		t.Fatalf("copy node: %v\n%s", err, out)
	}
	if err := os.Symlink("../lib/node_modules/npm/bin/npm-cli.js", filepath.Join(root, "usr/local/bin/npm")); err != nil {
		t.Fatal(err)
	}
	npmCache := consoleNpmCache(t)
	if out, err := exec.Command("cp", "-a", npmCache+"/.", filepath.Join(root, "root/.npm")).CombinedOutput(); err != nil {
		t.Fatalf("copy the npm cache: %v\n%s", err, out)
	}
	modcache := strings.TrimSpace(goEnv(t, "GOMODCACHE"))
	// The daemon serves in the background; the script waits (bounded) for
	// /healthz, runs the first sandbox, then stops the daemon with SIGTERM
	// so that it cleans its sandboxes up (the pid namespace takes the rest).
	script := `set -u
cd /src
start=$(date +%s%N)
setsid make run >/tmp/run.log 2>&1 &
mk=$!
ok=
for i in $(seq 1 3600); do
  if (exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && head -1 <&3 | grep -q ' 200') 2>/dev/null; then
    ok=1; break
  fi
  kill -0 $mk 2>/dev/null || break
  sleep 1
done
echo "healthz-ms $(( ($(date +%s%N) - start) / 1000000 ))"
if [ -z "$ok" ]; then echo "no /healthz"; tail -60 /tmp/run.log; kill -TERM -$mk 2>/dev/null; exit 1; fi
bin/agentbox run --url http://127.0.0.1:8000 --template host -- echo first-sandbox-ok; rc=$?
echo "sandbox-ms $(( ($(date +%s%N) - start) / 1000000 ))"
kill -TERM -$mk
for i in $(seq 1 60); do kill -0 $mk 2>/dev/null || break; sleep 1; done
sed -n '1,400p' /tmp/run.log | grep -v '^go: downloading' | tail -80
exit $rc
`
	if err := os.WriteFile(filepath.Join(root, "make-run.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := inRootSys(t, root, map[string]string{goroot: "/usr/local/go", modcache: "/gomod", npmDir: "/usr/local/lib/node_modules/npm"}, "",
		[]string{"PATH=/usr/local/go/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "GOMODCACHE=/gomod", "GOPROXY=off",
			"GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOTELEMETRY=off", "GOCACHE=/root/.cache/go-build", "npm_config_offline=true",
			"npm_config_update_notifier=false", "npm_config_audit=false"},
		"/bin/bash /make-run.sh")
	t.Logf("make run in the fresh root:\n%s", lastLines(out, 100))
	if err != nil || !strings.Contains(out, "first-sandbox-ok") {
		t.Fatalf("make run until /healthz and a first sandbox: %v", err)
	}
	ms := func(key string) time.Duration {
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, key+" "); ok {
				n, _ := time.ParseDuration(strings.TrimSpace(v) + "ms")
				return n
			}
		}
		return 0
	}
	prep := time.Since(cloned) - ms("sandbox-ms") // clone, dependency step, checks
	t.Logf("fresh machine: make run -> /healthz %s, -> first sandbox %s; clone -> first sandbox %s (the clone and dependency step took %s; cold Go and npm caches, modules and packages local)",
		ms("healthz-ms").Round(time.Second), ms("sandbox-ms").Round(time.Second), time.Since(cloned).Round(time.Second), prep.Round(time.Second))
}

// consoleNpmCache is an npm cache holding the console's locked packages
// (web/console/package-lock.json), made once into the test cache by npm ci
// from the registry, so that the fresh root's build reads it offline.
func consoleNpmCache(t *testing.T) string {
	t.Helper()
	src, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(src, "web/console/package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(testCache(t), "fresh-npm", hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "_cacache")); err == nil {
		return dir
	}
	work := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json"} {
		if err := copyFile(filepath.Join(src, "web/console", f), filepath.Join(work, f)); err != nil {
			t.Fatal(err)
		}
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ci := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error", "--cache", tmp)
	ci.Dir = work
	if out, err := ci.CombinedOutput(); err != nil {
		t.Skipf("cannot fill an npm cache with the console's packages (registry unreachable?): %v\n%s", err, lastLines(string(out), 20))
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
