package fake

import (
	"archive/tar"
	"context"
	"io"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ backend.Snapshotter = (*Backend)(nil)

// SnapshotDiff implements backend.Snapshotter with a scripted layer: one
// file, "snapshot", holding the sandbox's id. Host templates are refused
// as the native backend refuses them.
func (b *Backend) SnapshotDiff(ctx context.Context, id sandbox.ID, w io.Writer) error {
	b.count("snapshot")
	b.mu.Lock()
	bx, ok := b.boxes[id]
	var spec sandbox.Spec
	if ok {
		spec = bx.info.Spec
	}
	b.mu.Unlock()
	if !ok {
		return sandbox.ErrNotFound(id)
	}
	if spec.Template.Kind == sandbox.TemplateHost {
		return sandbox.Errorf(sandbox.ClassInvalid, "sandboxes of the host template cannot be snapshotted")
	}
	if b.SnapshotHook != nil {
		return b.SnapshotHook(ctx, id, w)
	}
	tw := tar.NewWriter(w)
	body := []byte(id)
	if err := tw.WriteHeader(&tar.Header{Name: "snapshot", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	return tw.Close()
}
