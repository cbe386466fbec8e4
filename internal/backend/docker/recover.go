package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Recover implements backend.Backend. It reattaches to every sandbox with
// a record and a container; a record without a container (a create that
// died half-way) and a container without a record (labelled as this
// instance's, but unknown) are removed.
func (b *Backend) Recover(ctx context.Context) ([]sandbox.Info, error) {
	entries, err := os.ReadDir(b.sbRoot)
	if err != nil {
		return nil, fmt.Errorf("docker: read state dir: %w", err)
	}
	known := map[string]bool{}
	var out []sandbox.Info
	for _, e := range entries {
		id := sandbox.ID(e.Name())
		if id.Validate() != nil || !e.IsDir() {
			continue
		}
		bx := &box{id: id, dir: filepath.Join(b.sbRoot, e.Name())}
		data, err := os.ReadFile(filepath.Join(bx.dir, "record.json"))
		if err == nil {
			err = json.Unmarshal(data, &bx.rec)
		}
		if err != nil || bx.rec.Spec.ID != id || bx.rec.Container != b.containerName(id) {
			b.log.Warn("removing sandbox without a valid record", "sandbox", id, "err", err)
			bx.rec.Container = b.containerName(id)
			if err := b.teardown(ctx, bx); err != nil {
				return nil, err
			}
			continue
		}
		bx.rec.Spec.AccessToken = bx.rec.AccessToken
		st, err := b.state(ctx, bx)
		if err != nil {
			if !cerrdefs.IsNotFound(err) {
				return nil, engineErr(err, "inspect container")
			}
			b.log.Warn("removing sandbox whose container is gone", "sandbox", id)
			if err := b.teardown(ctx, bx); err != nil {
				return nil, err
			}
			continue
		}
		known[bx.rec.Container] = true
		bx.mu.Lock()
		if st.Running && !bx.rec.Stopped && !st.Paused {
			if err := b.waitReady(ctx, bx, st.Pid); err != nil {
				b.log.Warn("stopping recovered sandbox whose agent does not answer", "sandbox", id, "err", err)
				_ = b.kill(ctx, bx)
				bx.rec.Stopped, bx.rec.Reason = true, "agent did not answer after a daemon restart"
				_ = b.saveRecord(bx)
			} else {
				b.attach(ctx, bx)
			}
		} else if st.Running && !st.Paused && bx.rec.Stopped {
			// Stopped by us but still running (a stop interrupted by a crash).
			_ = b.kill(ctx, bx)
		} else if !st.Running && !bx.rec.Stopped {
			bx.rec.Stopped, bx.rec.Reason = true, "agent exited while the daemon was down"
			_ = b.saveRecord(bx)
		} else if st.Paused {
			b.attach(ctx, bx)
		}
		b.mu.Lock()
		b.boxes[id] = bx
		b.mu.Unlock()
		out = append(out, b.info(ctx, bx))
		bx.mu.Unlock()
	}
	if err := b.removeOrphans(ctx, known); err != nil {
		return out, err
	}
	return out, nil
}

// removeOrphans removes this instance's containers that no record names.
func (b *Backend) removeOrphans(ctx context.Context, known map[string]bool) error {
	list, err := b.api.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", LabelInstance+"="+b.instance)})
	if err != nil {
		return engineErr(err, "list containers")
	}
	var errs []error
	for _, c := range list.Items {
		name := ""
		if len(c.Names) > 0 {
			name = c.Names[0][1:]
		}
		if known[name] {
			continue
		}
		b.log.Warn("removing orphaned sandbox container", "container", name, "sandbox", c.Labels[LabelSandbox])
		if _, err := b.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("docker: remove orphaned containers: %w", err)
	}
	return nil
}
