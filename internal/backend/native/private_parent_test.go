package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestDataDirUnderPrivateParent: a sandbox's init, its user namespace's
// root, must search every directory above its root filesystem. A data dir
// below a directory others may not search (0700, as /root; 0750 as many
// home directories) would fail every sandbox's start with "permission
// denied": the backend refuses it at start, naming the directory and the
// fix, and works once that is applied.
func TestDataDirUnderPrivateParent(t *testing.T) {
	testutil.RequireRoot(t)
	parent := testutil.ShortTempDir(t)
	private := filepath.Join(parent, "home")
	dataDir := filepath.Join(private, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o700, 0o750} {
		if err := os.Chmod(private, mode); err != nil {
			t.Fatal(err)
		}
		// Reached through a symlink, the real path is checked too.
		link := filepath.Join(parent, "link")
		_ = os.Remove(link)
		if err := os.Symlink(private, link); err != nil {
			t.Fatal(err)
		}
		for _, root := range []string{dataDir, filepath.Join(link, "data")} {
			b, err := New(Config{Root: root, AgentPath: testutil.AgentBinary(t)})
			if err == nil {
				b.Close()
				t.Fatalf("mode %o, root %s: backend started; its sandboxes cannot", mode, root)
			}
			if !strings.Contains(err.Error(), private+" ") || !strings.Contains(err.Error(), "chmod o+x "+private) {
				t.Fatalf("mode %o: error %q does not name %s and the fix", mode, err, private)
			}
		}
	}
	if err := os.Chmod(private, 0o711); err != nil {
		t.Fatal(err)
	}
	b := newTestBackend(t, dataDir)
	layers := imageLayers(t)
	for _, c := range []struct {
		name string
		tmpl sandbox.Template
		root bool
	}{
		{"host", sandbox.HostTemplate(), false},
		{"image", imageTemplate(layers, sandbox.ImageConfig{}), false},
		{"image-root", imageTemplate(layers, sandbox.ImageConfig{}), true},
	} {
		info := backendtest.Create(t, b, sandbox.Spec{Template: c.tmpl, WritableRoot: true, Root: c.root})
		r := backendtest.Exec(t, backendtest.Client(t, info, ""), `echo ok`)
		if r.Stdout != "ok\n" {
			t.Errorf("%s: exec: %+v", c.name, r)
		}
	}
}
