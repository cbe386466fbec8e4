package native

import (
	"context"
	"fmt"
	"io"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/layer"
)

var (
	_ backend.Snapshotter      = (*Backend)(nil)
	_ backend.KindCapabilities = (*Backend)(nil)
)

// snapshotExclude are upper-layer paths a snapshot leaves out: mount
// points and files that belong to one sandbox, not to its template (the
// agent's mount point, the per-sandbox /etc files, /workspace, which is
// the sandbox's disk rather than its root filesystem).
var snapshotExclude = []string{".agentbox", "etc/hosts", "etc/hostname", "etc/resolv.conf", "workspace", "tmp", "run"}

// errDirSnapshot refuses the snapshot of a dir template's sandbox. Its
// tree belongs to host ids outside the sandbox's range, and so does every
// directory the overlay copies up (the one of each mount point the
// runtime creates, /etc, at least): the layer's owners cannot be shifted
// back to image ids (layer.Diff refuses them), so no snapshot of such a
// sandbox ever succeeded. The conformance suite found it.
func errDirSnapshot(id sandbox.ID) error {
	return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s runs a dir template, whose files belong to host ids: only sandboxes of image templates can be snapshotted", id)
}

// CapabilitiesFor implements backend.KindCapabilities: no snapshots of
// dir templates (errDirSnapshot).
func (b *Backend) CapabilitiesFor(kind string) backend.Capabilities {
	c := b.Capabilities()
	if kind == sandbox.TemplateDir {
		c.Snapshot = false
	}
	return c
}

// SnapshotDiff implements backend.Snapshotter: the layer is the overlay
// upper directory of the sandbox's root (image templates), owners
// shifted back from the sandbox's host range to the image's ids. The
// sandbox is frozen (cgroup freezer) while its upper directory is read,
// so the layer is one consistent state of its files; a sandbox whose
// cgroup cannot be frozen is refused rather than read while it writes.
func (b *Backend) SnapshotDiff(ctx context.Context, id sandbox.ID, w io.Writer) error {
	if b.rootless {
		return sandbox.Errorf(sandbox.ClassUnavailable, "a rootless daemon runs host templates only, which have no layer to snapshot")
	}
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if isGVisor(bx.rec.Spec) {
		return errGVisor(id, "snapshots")
	}
	switch bx.rec.Spec.Template.Kind {
	case sandbox.TemplateHost:
		return sandbox.Errorf(sandbox.ClassInvalid, "sandbox %s runs the host template, whose root filesystem is the host's /usr: only sandboxes of image templates can be snapshotted", id)
	case sandbox.TemplateDir:
		return errDirSnapshot(id)
	}
	if bx.rec.Stopped || bx.container == nil {
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped; start it to snapshot it", id)
	}
	if !bx.rec.Paused { // a paused sandbox is frozen already and stays so
		if err := bx.container.Pause(); err != nil {
			return fmt.Errorf("freeze sandbox for its snapshot: %w", err)
		}
		defer func() {
			if err := bx.container.Resume(); err != nil {
				b.log.Error("thaw sandbox after its snapshot", "sandbox", id, "err", err)
			}
		}()
	}
	ids := b.idMap(bx.rec)
	opts := layer.DiffOptions{Exclude: snapshotExclude}
	if ids.userns {
		opts.UIDBase, opts.GIDBase = ids.base, ids.gidBase
	}
	if err := layer.Diff(ctx, bx.diskPath("upper"), w, opts); err != nil {
		return fmt.Errorf("snapshot sandbox %s: %w", id, err)
	}
	return nil
}
