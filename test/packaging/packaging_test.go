// Package packaging tests the ways agentbox is installed (docs/install.md):
// the systemd unit and `make install`, the release tarball, the container
// image and its compose files, the Helm chart, and the Go SDK as a
// dependency of another module. The quick ones run in `make test`; the
// image's (a bootstrap, an image build, containers) and the chart's on the
// test control plane run there too, or alone with `make package-test`.
package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// repoRoot is the checkout's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// binDir is the directory of the built binaries: the one of AGENTBOX_BIN
// (the Makefile sets it to bin/agentbox) when it holds every binary the
// artefacts ship; otherwise the test skips, as packaging needs `make build`
// (the web console inside the daemon included).
func binDir(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("AGENTBOX_BIN")
	if bin == "" {
		t.Skip("needs the binaries of `make build` (AGENTBOX_BIN; make package-test sets it)")
	}
	dir := filepath.Dir(bin)
	for _, b := range []string{"agentbox", "agentbox-kube", "agentbox-agent", "agentbox-init", "agentbox-shim"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Skipf("needs the binaries of `make build` in %s: %v", dir, err)
		}
	}
	return dir
}

// run runs a command and returns its standard output, failing the test
// with both streams when it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
