package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestKubeHandOff: bin/agentbox is built without Kubernetes support (tag
// nokube). For `agentbox node`, and for a serve whose settings ask for the
// Kubernetes backend, it becomes agentbox-kube from its own directory, with
// the same arguments and without its internal environment markers; with
// no agentbox-kube there it says what is missing. Here agentbox-kube is a
// script that reports how it was started.
func TestKubeHandOff(t *testing.T) {
	bin, _ := binaries(t)
	dir := testutil.ShortTempDir(t)
	lean := filepath.Join(dir, "agentbox")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lean, data, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "agentbox-kube")
	script := "#!/bin/sh\necho \"started $0 $*\"\necho \"markers $(env | grep -c '^_AGENTBOX_')\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(lean, args...)
		cmd.Env = append(cleanEnv(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"node", []string{"_AGENTBOX_SEALED_EXE=1", "_AGENTBOX_ORIGINAL_EXE=/elsewhere"}, []string{"node", "--set", "LOG_LEVEL=debug"}},
		{"serve with KUBE_BACKEND", []string{"KUBE_BACKEND=true"}, []string{"serve", "--port", "8123"}},
		{"serve --backend kube", nil, []string{"serve", "--backend", "kube"}},
		{"serve --set KUBE_BACKEND", nil, []string{"serve", "--set", "KUBE_BACKEND=true"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := run(c.env, c.args...)
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			want := "started " + fake + " " + strings.Join(c.args, " ") + "\nmarkers 0\n"
			if out != want {
				t.Fatalf("output %q, want %q (is %s the nokube build of make build?)", out, want, bin)
			}
		})
	}

	if err := os.Remove(fake); err != nil {
		t.Fatal(err)
	}
	out, err := run(nil, "node")
	if err == nil || !strings.Contains(out, "agentbox-kube was not found") {
		t.Fatalf("without agentbox-kube: err %v, output %q", err, out)
	}
}
