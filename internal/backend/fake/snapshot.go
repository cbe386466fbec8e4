package fake

import (
	"archive/tar"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ backend.Snapshotter = (*Backend)(nil)

// SnapshotDiff implements backend.Snapshotter. The layer holds one file,
// "snapshot", holding the sandbox's id (a marker tests look for), then the
// directories and regular files under the sandbox's RootDir — what its
// processes wrote, since a fake sandbox starts from an empty directory (a
// top-level "snapshot" of its own gives way to the marker). Host templates
// are refused as the native backend refuses them.
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
	root := b.RootDir(id)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		switch {
		case err != nil || rel == ".":
			return err
		case rel == "snapshot" && d.IsDir():
			return fs.SkipDir
		case rel == "snapshot":
			return nil
		}
		if !d.Type().IsRegular() && !d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
