package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// imageLayers builds a two-layer image by hand, in overlayfs form as the
// template store unpacks layers: the lower one a small root filesystem
// (host binaries and their libraries) with its own accounts, the upper
// one deleting a file (a whiteout) and replacing a directory (opaque).
func imageLayers(t *testing.T) []string {
	t.Helper()
	lower := hostLikeRootfs(t)
	for _, bin := range []string{"env", "grep", "rm", "mkdir", "chown"} {
		copyWithLibs(t, mustLookPath(t, bin), lower)
	}
	files := map[string]string{
		"etc/passwd":         "root:x:0:0:root:/root:/bin/sh\napp:x:1001:1001:app:/home/app:/bin/sh\n",
		"etc/group":          "root:x:0:\napp:x:1001:\nstaff:x:50:\n",
		"etc/deleted-me":     "gone in layer 2\n",
		"opt/data/old":       "hidden by the opaque directory\n",
		"srv/app/readme":     "image workdir\n",
		"home/app/.profile":  "app's own\n",
		"etc/image-only":     "from the lower layer\n",
		"usr/share/owned-by": "app\n",
	}
	for name, body := range files {
		p := filepath.Join(lower, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"home/app", "home/app/.profile", "usr/share/owned-by"} {
		if err := os.Lchown(filepath.Join(lower, p), 1001, 1001); err != nil {
			t.Fatal(err)
		}
	}
	// The host skeleton's /etc resolv.conf slot: images often have a link.
	if err := os.Symlink("../run/systemd/resolve/stub-resolv.conf", filepath.Join(lower, "etc", "resolv.conf")); err != nil {
		t.Fatal(err)
	}

	upper := filepath.Join(testutil.ShortTempDir(t), "layer2")
	for _, d := range []string{"etc", "opt/data"} {
		if err := os.MkdirAll(filepath.Join(upper, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mknod(filepath.Join(upper, "etc", "deleted-me"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(upper, "opt", "data"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "opt", "data", "new"), []byte("layer 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "etc", "layer2"), []byte("from layer 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{lower, upper}
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range []string{"/usr/bin", "/bin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	t.Skipf("host lacks %s", name)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func imageTemplate(layers []string, cfg sandbox.ImageConfig) sandbox.Template {
	return sandbox.Template{Ref: "test-image", Digest: "sha256:test", Kind: sandbox.TemplateImage, Layers: layers, Config: cfg}
}

// TestImageTemplate: a sandbox of an image template sees the merged
// layers (whiteout and opaque directory applied) with the image's own ids,
// its env, workdir and accounts; writes stay in that sandbox.
func TestImageTemplate(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	if err := b.idmappedOverlaySupported(); err != nil {
		t.Fatalf("this kernel (6.x) should support idmapped overlay layers: %v", err)
	}
	layers := imageLayers(t)
	cfg := sandbox.ImageConfig{Env: []string{"IMG=image", "BOTH=image", "PATH=/usr/local/bin:/usr/bin:/bin", "AGENTBOX_ACCESS_TOKEN=leak"}, WorkingDir: "/srv/app"}
	tmpl := imageTemplate(layers, cfg)

	a := backendtest.Create(t, b, sandbox.Spec{Template: tmpl, WritableRoot: true, Root: true, Env: map[string]string{"BOTH": "request"}})
	ca := backendtest.Client(t, a, "")
	r := backendtest.Exec(t, ca, `cat /etc/layer2 /etc/image-only; test -e /etc/deleted-me && echo deleted-me-visible; ls /opt/data; echo "$IMG $BOTH"; pwd; id -u; echo "tok=$AGENTBOX_ACCESS_TOKEN"`)
	want := "from layer 2\nfrom the lower layer\nnew\nimage request\n/srv/app\n0\ntok=\n"
	if r.Stdout != want || r.Exit.ExitCode != 0 {
		t.Fatalf("image sandbox = %+v, want stdout %q", r, want)
	}
	// Image ids, not host ids: image root files are root's, app's are app's.
	r = backendtest.Exec(t, ca, `ls -nd /etc/layer2 /usr/share/owned-by /home/app | while read mode links uid gid rest; do echo "$uid:$gid"; done`)
	if r.Stdout != "0:0\n1001:1001\n1001:1001\n" {
		t.Fatalf("owners inside = %q (%s), want image ids", r.Stdout, r.Stderr)
	}
	// The per-sandbox /etc files replace the image's (resolv.conf was a link).
	r = backendtest.Exec(t, ca, `cat /etc/hostname; grep -c nameserver /etc/resolv.conf`)
	if r.Stdout != string(a.ID)+"\n1\n" {
		t.Fatalf("per-sandbox /etc = %q", r.Stdout)
	}
	// Root can change the root filesystem, on the sandbox's own disk.
	r = backendtest.Exec(t, ca, `echo mine > /etc/written && rm /etc/image-only && echo x > /opt/data/new && mkdir -p /usr/local/pkg && echo ok`)
	if r.Stdout != "ok\n" {
		t.Fatalf("writes in a root image sandbox: %+v", r)
	}

	// Another sandbox of the same template sees none of it.
	other := backendtest.Create(t, b, sandbox.Spec{Template: tmpl, WritableRoot: true})
	co := backendtest.Client(t, other, "")
	r = backendtest.Exec(t, co, `test -e /etc/written && echo leaked; cat /etc/image-only /opt/data/new; id -u; echo "$HOME"`)
	if r.Stdout != "from the lower layer\nlayer 2\n1000\n/home/user\n" {
		t.Fatalf("second sandbox = %+v", r)
	}
	// Nor do the layer directories.
	for _, p := range []string{filepath.Join(layers[0], "etc", "written"), filepath.Join(layers[1], "etc", "written"), filepath.Join(layers[1], "usr")} {
		if fileExists(p) {
			t.Errorf("%s appeared in a layer", p)
		}
	}
	if data, err := os.ReadFile(filepath.Join(layers[1], "opt", "data", "new")); err != nil || string(data) != "layer 2\n" {
		t.Errorf("layer file changed: %q %v", data, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(layers[0], "etc", "layer2"), &st); err == nil {
		t.Error("layer 2's file appeared in layer 1")
	}
	if err := unix.Stat(filepath.Join(layers[0], "etc", "image-only"), &st); err != nil || st.Uid != 0 {
		t.Errorf("layer file owner changed: uid %d %v", st.Uid, err)
	}
	// No host path of a layer shows inside.
	r = backendtest.Exec(t, ca, `cat /proc/self/mountinfo`)
	for _, l := range layers {
		if strings.Contains(r.Stdout, l) {
			t.Errorf("mountinfo names layer %s:\n%s", l, r.Stdout)
		}
	}
}

// TestImageTemplateUser: the image's USER is who processes run as unless
// the sandbox is a root one; HOME comes from the image's passwd.
func TestImageTemplateUser(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	layers := imageLayers(t)
	cases := []struct {
		user string
		root bool
		want string
	}{
		{"app", false, "1001 1001 /home/app app's own\n"},
		{"1001:staff", false, "1001 50 /home/app app's own\n"},
		{"app", true, "0 0 /root \n"},
		{"root", false, "1000 1000 /home/user \n"},
	}
	for _, c := range cases {
		tmpl := imageTemplate(layers, sandbox.ImageConfig{User: c.user})
		info := backendtest.Create(t, b, sandbox.Spec{Template: tmpl, WritableRoot: true, Root: c.root})
		ca := backendtest.Client(t, info, "")
		r := backendtest.Exec(t, ca, `echo "$(id -u) $(id -g) $HOME $(cat $HOME/.profile 2>/dev/null)"`)
		if r.Stdout != c.want {
			t.Errorf("user %q root %v: %q (%s), want %q", c.user, c.root, r.Stdout, r.Stderr, c.want)
		}
		// /workspace belongs to whoever runs there.
		if r := backendtest.Exec(t, ca, `echo w > /workspace/w && echo ok`); r.Stdout != "ok\n" {
			t.Errorf("user %q root %v: /workspace not writable: %q %q", c.user, c.root, r.Stdout, r.Stderr)
		}
	}
	_, err := b.Create(ctxT(t), sandbox.Spec{ID: sandbox.NewID(), Template: imageTemplate(layers, sandbox.ImageConfig{User: "nobody-here"})})
	if sandbox.ClassOf(err) != sandbox.ClassInvalid || !strings.Contains(err.Error(), "nobody-here") {
		t.Fatalf("unknown image user: %v, want invalid_argument naming it", err)
	}
}

// TestImageTemplateChecks: bad layer lists are refused before anything is
// built.
func TestImageTemplateChecks(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	many := make([]string, maxImageLayers+1)
	for i := range many {
		many[i] = dir
	}
	for name, layers := range map[string][]string{
		"none":     nil,
		"relative": {"layer"},
		"unclean":  {dir + "/../x"},
		"missing":  {filepath.Join(dir, "missing")},
		"symlink":  {link},
		"proc":     {"/proc/self"},
		"too many": many,
	} {
		err := checkTemplate(imageTemplate(layers, sandbox.ImageConfig{}), nil, false)
		if sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if err := checkTemplate(imageTemplate([]string{dir}, sandbox.ImageConfig{}), nil, true); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("rootless image: %v, want refused", err)
	}
}

func TestImageConformance(t *testing.T) {
	testutil.RequireRoot(t)
	layers := imageLayers(t)
	backendtest.Run(t, backendtest.Harness{
		New:      func(t *testing.T, dir string) backend.Backend { return newTestBackend(t, dir) },
		StateDir: func(t *testing.T) string { return testutil.ShortTempDir(t) },
		Template: imageTemplate(layers, sandbox.ImageConfig{}),
		Abandon:  func(b backend.Backend) { b.(*Backend).abandoned.Store(true) },
	})
}
