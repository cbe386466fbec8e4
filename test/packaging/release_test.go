package packaging

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRelease: scripts/release.sh (make release) writes the versioned
// tarball and the Python SDK's wheel with SHA256SUMS that sha256sum -c
// accepts; the tarball holds the five binaries (executable, owned by root),
// the unit for /usr/local/bin, the settings file and docs/install.md, all
// under one versioned directory; and its agentbox names its commit.
func TestRelease(t *testing.T) {
	bin := binDir(t)
	root := repoRoot(t)
	if filepath.Clean(bin) != filepath.Join(root, "bin") {
		t.Skipf("release.sh packs the checkout's bin/, not %s", bin)
	}
	out := t.TempDir()
	const version = "9.9.9-test"
	arch := strings.TrimSpace(run(t, root, nil, "go", "env", "GOARCH"))
	dir := "agentbox-" + version + "-linux-" + arch
	// The fastest compression: what is checked is the content.
	tarball := strings.TrimSpace(run(t, root, []string{"GZIP_LEVEL=1"}, "./scripts/release.sh", version, out))
	if want := filepath.Join(out, dir+".tar.gz"); tarball != want {
		t.Fatalf("release.sh printed %q, want %q", tarball, want)
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sums), filepath.Base(tarball)) || !strings.Contains(string(sums), ".whl") {
		t.Errorf("SHA256SUMS names %q, want the tarball and the wheel", sums)
	}
	run(t, out, nil, "sha256sum", "-c", "SHA256SUMS")

	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(zr)
	extracted := filepath.Join(t.TempDir(), "agentbox")
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(h.Name, dir+"/")
		if !ok && h.Name != dir+"/" || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: outside %s/ or not owned by root (%d:%d)", h.Name, dir, h.Uid, h.Gid)
		}
		names = append(names, rel)
		switch {
		case strings.HasPrefix(rel, "bin/") && rel != "bin/" && h.Mode&0o111 == 0:
			t.Errorf("%s is not executable", h.Name)
		case rel == "agentbox.service":
			unit, _ := io.ReadAll(tr)
			if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/agentbox serve --config /etc/agentbox/agentbox.env") || strings.Contains(string(unit), "@") {
				t.Errorf("agentbox.service:\n%s", unit)
			}
		case rel == "bin/agentbox":
			data, _ := io.ReadAll(tr)
			if err := os.WriteFile(extracted, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range []string{"bin/agentbox", "bin/agentbox-kube", "bin/agentbox-agent", "bin/agentbox-init", "bin/agentbox-shim",
		"agentbox.service", "agentbox.env", "install.md", "README.md"} {
		if !slices.Contains(names, want) {
			t.Errorf("the tarball lacks %s: %v", want, names)
		}
	}
	v, err := exec.Command(extracted, "version").Output()
	if err != nil || !strings.Contains(string(v), "commit") || !strings.Contains(string(v), "backends") {
		t.Errorf("the tarball's agentbox version: %v\n%s", err, v)
	}
}
