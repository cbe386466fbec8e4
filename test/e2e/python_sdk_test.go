package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// The Python SDK (sdk/python) end to end: its wheel, built offline and
// installed into a virtual environment over Debian's python3
// (python3-httpx, python3-pytest, python3-pytest-asyncio,
// python3-websockets; scripts/install-deps.sh installs them), runs its
// pytest suites against a real daemon with API keys and a warm pool, and
// the test fails when pytest does.

const (
	pyKey      = "py-alice-key"
	pyOtherKey = "py-bob-key"
)

// requirePythonSDKDeps skips unless /usr/bin/python3 has the suite's modules.
func requirePythonSDKDeps(t *testing.T) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", "import httpx, pytest, pytest_asyncio, websockets")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("needs /usr/bin/python3 with httpx, pytest, pytest-asyncio and websockets "+
			"(apt-get install python3-httpx python3-pytest python3-pytest-asyncio python3-websockets): %v: %s", err, out)
	}
}

func TestPythonSDK(t *testing.T) {
	requirePythonSDKDeps(t)
	// The suites run against the wheel installed the documented way, not
	// against the sources beside them.
	python := pythonSDKVenv(t)
	// Networking on a bridge and subnet of its own, for the egress policy
	// tests (no traffic leaves: they check the policy's bookkeeping).
	d := startDaemon(t, "API_KEYS="+pyKey+":alice,"+pyOtherKey+":bob", "TEMPLATE_ADMIN_USERS=alice",
		"POOL_SIZE=2", "MAX_SANDBOXES_PER_USER=40", "MAX_SANDBOX_INSTANCES=60",
		// One heavy request more than the default 16: test_envs.py's barrier
		// checks on 16 steps in flight with one file request at a time.
		"MAX_REQUESTS_PER_USER=17",
		"NETWORK=on", "NETWORK_BRIDGE=abxpysdk0", "NETWORK_SUBNET=10.117.0.0/16")
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// -p no:cacheprovider keeps pytest from writing .pytest_cache into the
	// checkout; AGENTBOX_SDK_INSTALLED keeps conftest.py from putting the
	// sources on sys.path (it checks that agentbox comes from elsewhere).
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-p", "no:cacheprovider", "-v",
		"-o", "asyncio_mode=strict", filepath.Join(root, "sdk", "python", "tests"))
	cmd.Dir = t.TempDir()
	cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+pyKey,
		"AGENTBOX_OTHER_API_KEY="+pyOtherKey, "PYTHONDONTWRITEBYTECODE=1", "AGENTBOX_SDK_INSTALLED=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest sdk/python/tests:\n%s", out)
	if err != nil {
		t.Fatalf("the Python SDK suite failed: %v\ndaemon log tail:\n%s", err, tail(d.logs.String(), 80))
	}
}

// pythonSDKVenv installs the SDK the way docs/python.md says and returns
// the environment's python: the wheel built by scripts/sdk-python.sh (what
// `make sdk-python` runs; offline, from a copy of the sources) into a
// temporary directory, a fresh `python3 -m venv --system-site-packages`
// (Debian's httpx, websockets and pytest), and `pip install --no-index` of
// the wheel. It checks that none of this wrote into the checkout and that
// the environment imports the installed package, with its py.typed.
func pythonSDKVenv(t *testing.T) string {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import setuptools, wheel, venv, ensurepip").Run(); err != nil {
		t.Skipf("needs setuptools, wheel and venv for /usr/bin/python3 "+
			"(apt-get install python3-setuptools python3-wheel python3-venv): %v", err)
	}
	if err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run(); err != nil {
		t.Skipf("needs pip for /usr/bin/python3 (apt-get install python3-pip): %v", err)
	}
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	before := checkoutState(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dist := t.TempDir()
	build := exec.CommandContext(ctx, filepath.Join(root, "scripts", "sdk-python.sh"), dist)
	build.Env = append(cleanEnv(), "PYTHON=/usr/bin/python3")
	var stderr strings.Builder
	build.Stderr = &stderr
	out, err := build.Output()
	if err != nil {
		t.Fatalf("scripts/sdk-python.sh: %v\n%s", err, stderr.String())
	}
	whl := strings.TrimSpace(string(out))
	if filepath.Dir(whl) != dist || !strings.HasSuffix(whl, "-py3-none-any.whl") {
		t.Fatalf("scripts/sdk-python.sh printed %q, want a wheel in %s", whl, dist)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	pip := exec.CommandContext(ctx, filepath.Join(venv, "bin", "pip"), "install", "--no-index", whl)
	pip.Env = append(cleanEnv(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install --no-index %s: %v\n%s", filepath.Base(whl), err, out)
	}
	python := filepath.Join(venv, "bin", "python")
	check := exec.CommandContext(ctx, python, "-c", `
import os, sys, agentbox, agentbox.envs
assert agentbox.__file__.startswith(sys.prefix + os.sep), (agentbox.__file__, sys.prefix)
assert os.path.exists(os.path.join(os.path.dirname(agentbox.__file__), "py.typed"))
print(agentbox.__version__)`)
	check.Dir = t.TempDir()
	check.Env = append(cleanEnv(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("import the installed package: %v\n%s", err, out)
	}
	if after := checkoutState(t, root); after != before {
		t.Fatalf("building and installing the wheel changed the checkout:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	return python
}

// checkoutState is git's view of sdk/python, ignored files included ("" when
// the checkout is not a git work tree).
func checkoutState(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "status", "--porcelain", "--ignored", "--untracked-files=all", "--", "sdk/python").Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// TestPythonSDKInstall installs the SDK as docs/python.md says (a wheel
// built offline, a virtual environment, pip --no-index) and uses it against
// a daemon: a sandbox is created, runs a command and is destroyed.
func TestPythonSDKInstall(t *testing.T) {
	requirePythonSDKDeps(t)
	python := pythonSDKVenv(t)
	d := startDaemon(t, "API_KEYS="+pyKey+":alice")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", `
from agentbox import Sandbox
with Sandbox.create(timeout=60) as sbx:
    r = sbx.commands.run("echo hello from $(id -un)")
    assert r.exit_code == 0, r
    print(r.stdout, end="")
assert not Sandbox.list(), "the sandbox outlived its with block"
`)
	cmd.Dir = t.TempDir()
	cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+pyKey, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "hello from user\n" {
		t.Fatalf("the installed SDK against the daemon: %v\n%s", err, out)
	}
}

// TestPythonSDKTypes checks the package's annotations with mypy --strict
// (Debian's mypy): the py.typed promise holds.
func TestPythonSDKTypes(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-m", "mypy", "--version").Run(); err != nil {
		t.Skipf("needs mypy for /usr/bin/python3 (apt-get install mypy): %v", err)
	}
	requirePythonSDKDeps(t)
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "mypy", "--strict", "--cache-dir", t.TempDir(), "agentbox")
	cmd.Dir = filepath.Join(root, "sdk", "python")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mypy --strict sdk/python/agentbox: %v\n%s", err, out)
	}
}
