package native

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestDisksStayOutOfDaemonMounts checks that a sandbox's disk, overlay
// root and sysfs are mounted in the sandbox's own mount namespace and never
// in the daemon's (mountns.go): mounted there, each sandbox grew the
// daemon's mount table and made every later create slower. The daemon
// still reaches the disk (usage, snapshot, the agent's log), also after a
// restart, when it has to take hold of the live disk again.
func TestDisksStayOutOfDaemonMounts(t *testing.T) {
	dir := testutil.ShortTempDir(t)
	b := newTestBackend(t, dir)
	ctx := ctxT(t)
	specs := []sandbox.Spec{
		{Template: sandbox.HostTemplate()},
		{Template: sandbox.HostTemplate(), WritableRoot: true}, // overlay /usr
		{Template: sandbox.HostTemplate(), Root: true},
		{Template: sandbox.Template{Kind: sandbox.TemplateDir, Dir: hostLikeRootfs(t)}},                  // overlay root
		{Template: imageTemplate(imageLayers(t), sandbox.ImageConfig{}), WritableRoot: true, Root: true}, // idmapped layers
	}
	var ids []sandbox.ID
	for _, spec := range specs {
		info := backendtest.Create(t, b, spec)
		ids = append(ids, info.ID)
		c := backendtest.Client(t, info, "")
		if r := backendtest.Exec(t, c, "echo kept > /workspace/f && cat /workspace/f"); r.Stdout != "kept\n" {
			t.Fatalf("use the disk: %+v", r)
		}
	}
	if lines := mountsUnder(t, b.sbRoot); len(lines) > 0 {
		t.Fatalf("sandbox mounts in the daemon's mount namespace:\n%s", strings.Join(lines, "\n"))
	}
	checkDisk := func(b *Backend, id sandbox.ID) {
		t.Helper()
		st, err := b.Stats(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.DiskTotalBytes <= 0 || st.DiskUsedBytes <= 0 {
			t.Errorf("%s: disk usage not seen by the daemon: %+v", id, st)
		}
		bx, err := b.lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(bx.diskPath("workspace", "f"))
		if err != nil || string(data) != "kept\n" {
			t.Errorf("%s: the daemon reads the disk: %q %v", id, data, err)
		}
		if bx.rec.Spec.Template.Kind != sandbox.TemplateImage {
			return
		}
		if err := b.SnapshotDiff(ctx, id, io.Discard); err != nil {
			t.Errorf("%s: snapshot: %v", id, err)
		}
	}
	for _, id := range ids {
		checkDisk(b, id)
	}

	// A restarted daemon takes hold of the live disks again, still
	// outside its own namespace.
	b.abandoned.Store(true)
	b2 := newTestBackend(t, dir)
	if _, err := b2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		checkDisk(b2, id)
	}
	if lines := mountsUnder(t, b.sbRoot); len(lines) > 0 {
		t.Fatalf("sandbox mounts in the daemon's mount namespace after a restart:\n%s", strings.Join(lines, "\n"))
	}
	for _, id := range ids {
		bx, _ := b2.lookup(id)
		image := bx.paths.image
		if err := b2.Destroy(context.WithoutCancel(ctx), id); err != nil {
			t.Fatal(err)
		}
		if dev := loopInUse(image); dev != "" {
			t.Errorf("%s: loop device %s still holds the destroyed sandbox's disk", id, dev)
		}
	}
}

// mountsUnder returns the daemon's mountinfo lines of mounts below dir
// (the sandboxes' directories).
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, line)
		}
	}
	return out
}
