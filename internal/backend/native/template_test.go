package native

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSecurityTemplateDirValidation: a dir: template names exactly one real
// directory that is not the host, a pseudo filesystem or server data.
func TestSecurityTemplateDirValidation(t *testing.T) {
	base := testutil.ShortTempDir(t)
	good := filepath.Join(base, "rootfs")
	dataDir := filepath.Join(base, "data")
	for _, d := range []string{good, filepath.Join(good, "usr"), filepath.Join(dataDir, "native", "state")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink to / and one in a middle component.
	rootLink := filepath.Join(base, "root-link")
	midLink := filepath.Join(base, "mid-link")
	dataLink := filepath.Join(base, "data-link")
	for link, target := range map[string]string{rootLink: "/", midLink: good, dataLink: dataDir} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"a:b", "a,upperdir=x", `a\b`, "a b", "a\tb"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	private := []string{dataDir}

	cases := []struct {
		dir, want string // want: a fragment of the error, "" for valid
	}{
		{good, ""},
		{filepath.Join(good, "usr"), ""},
		{"/", "host root"},
		{rootLink, "symbolic link"},
		{filepath.Join(midLink, "usr"), "symbolic link"},
		{dataLink, "symbolic link"},
		{filepath.Join(base, "a:b"), "':'"},
		{filepath.Join(base, "a:b") + ":" + good, "':'"},
		{filepath.Join(base, "a,upperdir=x"), "','"},
		{filepath.Join(base, `a\b`), `'\'`},
		{filepath.Join(base, "a b"), "spaces"},
		{filepath.Join(base, "a\tb"), "control"},
		{dataDir, "server's or its users' data"},
		{filepath.Join(dataDir, "native", "state"), "server's or its users' data"},
		{base, "server's or its users' data"}, // contains the data dir
		{"/proc", "kernel or runtime"},
		{"/proc/1/root", "kernel or runtime"},
		{"/sys/fs/cgroup", "kernel or runtime"},
		{"/dev", "kernel or runtime"},
		{"/run", "kernel or runtime"},
		{"relative/path", "absolute"},
		{"rootfs", "absolute"},
		{good + "/../rootfs", "clean"},
		{good + "/", "clean"},
		{filepath.Join(base, "missing"), "not a directory"},
		{filepath.Join(good, "file"), "not a directory"},
	}
	if err := os.WriteFile(filepath.Join(good, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		err := checkTemplate(dirTemplate(c.dir), private, false)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("dir:%s: unexpected error %v", c.dir, err)
		case c.want != "" && err == nil:
			t.Errorf("dir:%s: accepted, want an error about %q", c.dir, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("dir:%s: error %q, want it to mention %q", c.dir, err, c.want)
		case c.want != "" && sandbox.ClassOf(err) != sandbox.ClassInvalid:
			t.Errorf("dir:%s: class %s, want invalid_argument", c.dir, sandbox.ClassOf(err))
		}
	}
	// A bind mount of a pseudo filesystem elsewhere is found by its type.
	if os.Geteuid() == 0 {
		mnt := filepath.Join(base, "procbind")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("/proc", mnt, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind /proc: %v", err)
		}
		defer unix.Unmount(mnt, unix.MNT_DETACH)
		if err := checkTemplate(dirTemplate(mnt), private, false); err == nil || !strings.Contains(err.Error(), "filesystem") {
			t.Errorf("a bind mount of /proc: %v, want refused for its filesystem type", err)
		}
	}
}

// TestSecurityOverlayOptions: no path reaches the overlay mount options
// with a separator in it.
func TestSecurityOverlayOptions(t *testing.T) {
	if _, err := overlayOptions("/a", "/b/upper", "/b/work"); err != nil {
		t.Fatalf("plain paths refused: %v", err)
	}
	for _, p := range []string{"/a:/etc", "/a,upperdir=/x", `/a\:b`, "/a\nb"} {
		if opts, err := overlayOptions(p, "/b/upper", "/b/work"); err == nil {
			t.Errorf("lower %q accepted: %s", p, opts)
		}
		if opts, err := overlayOptions("/a", p, "/b/work"); err == nil {
			t.Errorf("upper %q accepted: %s", p, opts)
		}
	}
}

// TestSecurityDestroyRevokesHeldDisk: when a directory of a sandbox's disk
// is still mounted somewhere else at Destroy (as a tenant once did by
// naming it as their template), the data is no longer readable there
// afterwards and the disk's loop device is released with the last holder.
func TestSecurityDestroyRevokesHeldDisk(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	c := backendtest.Client(t, info, "")
	if r := backendtest.Exec(t, c, "echo secret > /workspace/secret.txt && chmod 600 /workspace/secret.txt && sync && echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("write secret: %+v", r)
	}
	bx, err := b.lookup(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	image := bx.paths.image
	// The disk is mounted in the sandbox's namespace only (mountns.go): a
	// holder outside it is a descriptor opened through the daemon's.
	held, err := os.Open(bx.diskPath("workspace", "secret.txt"))
	if err != nil {
		t.Fatalf("open the sandbox's file from outside: %v", err)
	}
	defer held.Close()
	read := func() (string, error) {
		buf := make([]byte, 64)
		n, err := held.ReadAt(buf, 0)
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return string(buf[:n]), err
	}
	if data, err := read(); err != nil || data != "secret\n" {
		t.Fatalf("read through the held descriptor before destroy: %q %v", data, err)
	}

	if err := b.Destroy(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	// Not cached: the page cache would answer without the filesystem.
	_ = unix.Fadvise(int(held.Fd()), 0, 0, unix.FADV_DONTNEED)
	data, err := read()
	if err == nil {
		t.Fatalf("the destroyed sandbox's file is still readable through a descriptor held elsewhere: %q", data)
	}
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("read after destroy: %v, want EIO", err)
	}
	if err := held.Close(); err != nil {
		t.Fatalf("close the holder: %v", err)
	}
	if dev := loopInUse(image); dev != "" {
		t.Errorf("loop device %s still holds the destroyed sandbox's disk", dev)
	}
}
