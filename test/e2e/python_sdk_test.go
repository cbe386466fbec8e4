package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// The Python SDK (sdk/python) end to end: its pytest suites run with
// Debian's python3 (python3-httpx, python3-pytest, python3-pytest-asyncio,
// python3-websockets; scripts/install-deps.sh installs them) against a real
// daemon with API keys and a warm pool, and the test fails when pytest does.

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
	// Networking on a bridge and subnet of its own, for the egress policy
	// tests (no traffic leaves: they check the policy's bookkeeping).
	d := startDaemon(t, "API_KEYS="+pyKey+":alice,"+pyOtherKey+":bob", "TEMPLATE_ADMIN_USERS=alice",
		"POOL_SIZE=2", "MAX_SANDBOXES_PER_USER=40", "MAX_SANDBOX_INSTANCES=60",
		"NETWORK=on", "NETWORK_BRIDGE=abxpysdk0", "NETWORK_SUBNET=10.117.0.0/16")
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// -p no:cacheprovider keeps pytest from writing .pytest_cache into the checkout.
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "pytest", "-p", "no:cacheprovider", "-v",
		"-o", "asyncio_mode=strict", filepath.Join(root, "sdk", "python", "tests"))
	cmd.Dir = filepath.Join(root, "sdk", "python")
	cmd.Env = append(cleanEnv(), "AGENTBOX_URL="+d.url, "AGENTBOX_API_KEY="+pyKey,
		"AGENTBOX_OTHER_API_KEY="+pyOtherKey, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest sdk/python/tests:\n%s", out)
	if err != nil {
		t.Fatalf("the Python SDK suite failed: %v\ndaemon log tail:\n%s", err, tail(d.logs.String(), 80))
	}
}

// TestPythonSDKInstall installs the package the way docs/python.md says,
// offline (setuptools from Debian, no build isolation), into a directory of
// its own, and imports it from there: the packaging works and ships
// py.typed.
func TestPythonSDKInstall(t *testing.T) {
	requirePythonSDKDeps(t)
	if err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run(); err != nil {
		t.Skipf("needs pip for /usr/bin/python3 (apt-get install python3-pip): %v", err)
	}
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// A copy: setuptools writes build/ and *.egg-info next to the sources.
	src := filepath.Join(t.TempDir(), "python")
	if out, err := exec.Command("cp", "-r", filepath.Join(root, "sdk", "python"), src).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	site := filepath.Join(t.TempDir(), "site")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "pip", "install", "--no-build-isolation",
		"--no-deps", "--no-index", "--target", site, src)
	install.Env = append(cleanEnv(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	check := exec.CommandContext(ctx, "/usr/bin/python3", "-c", `
import os, sys, agentbox, agentbox.envs
assert agentbox.__file__.startswith(sys.argv[1]), agentbox.__file__
assert os.path.exists(os.path.join(os.path.dirname(agentbox.__file__), "py.typed"))
print(agentbox.__version__)`, site)
	check.Dir = t.TempDir()
	check.Env = append(cleanEnv(), "PYTHONPATH="+site)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("import the installed package: %v\n%s", err, out)
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
