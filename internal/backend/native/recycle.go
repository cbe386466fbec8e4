package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Recycle implements backend.Recycler: it resets a sandbox in place to the
// state of a fresh one of the same spec, for another user.
//
// The reset reuses what a create pays for once (the sandbox directory, its
// host id range, the disk bucket's admission) and redoes the rest the same
// way a create does, so that it keeps exactly a create's guarantees:
//   - every process dies: init is SIGKILLed, which kills its whole pid
//     namespace, and libcontainer's Destroy kills whatever is left in the
//     cgroup and removes the cgroups (limits come back from the spec);
//   - the agent's state (env, code contexts, PTYs, its access token) dies
//     with it; a new agent starts with req.AccessToken;
//   - the disk (workspace, home, root's home, the writable layer) is
//     replaced by a fresh sparse copy of the formatted template image, so
//     not even deleted blocks or extended attributes survive; /tmp and
//     /dev/shm are tmpfs mounts of the new init;
//   - the network namespace and its egress rules are torn down and set up
//     again with req.Network.
//
// A failure leaves the sandbox stopped (with no processes); the caller
// destroys it.
func (b *Backend) Recycle(ctx context.Context, id sandbox.ID, req backend.RecycleRequest) error {
	if req.AccessToken == "" {
		return errors.New("recycle: a new access token is required")
	}
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	spec := bx.rec.Spec
	switch {
	case isGVisor(spec):
		return errGVisor(id, "in-place recycle")
	case b.rootless:
		return sandbox.Errorf(sandbox.ClassUnavailable, "recycle needs per-sandbox disks (not rootless)")
	case spec.WorkspaceDir != "":
		// A host directory is not ours to wipe.
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s has a host workspace directory: it cannot be recycled", id)
	}
	if req.Network.Mode == "" {
		req.Network.Mode = sandbox.NetworkNone
	}
	if req.Network.Mode != spec.Network.Mode {
		return sandbox.Errorf(sandbox.ClassConflict, "recycle cannot change the network mode (%s to %s)", spec.Network.Mode, req.Network.Mode)
	}
	tmpl := spec.Template
	if err := b.CheckTemplate(tmpl); err != nil {
		return sandbox.Wrap(sandbox.ClassConflict, err, "template of the sandbox is gone")
	}
	bx.phases = startPhases(ctx, b.cfg.PhaseObserver, "recycle")
	defer func() { bx.phases = nil }()

	if bx.warm != nil {
		err := b.warmReset(ctx, bx, req)
		if err == nil {
			bx.forNextUser(spec, req)
			return b.saveRecycled(bx)
		}
		// Whatever it left, the full recycle replaces.
		b.log.Info("warm reset not possible: recycling in full", "sandbox", id, "reason", err)
		bx.phases = startPhases(ctx, b.cfg.PhaseObserver, "recycle")
	}

	// Processes, cgroups, network, mounts: all gone, as at a destroy.
	loopDev := bx.loopDev // teardown forgets it
	b.teardown(ctx, bx, false)
	bx.rec.Stopped = true
	bx.rec.Reason = "recycling"
	if err := b.revokeAndReplaceDisk(bx, loopDev); err != nil {
		_ = b.saveRecord(bx)
		return err
	}
	bx.phases.mark("disk: revoke check + fresh sparse copy")

	bx.forNextUser(spec, req)
	net, err := b.setupNetwork(ctx, bx)
	if err != nil {
		b.teardown(context.WithoutCancel(ctx), bx, false)
		_ = b.saveRecord(bx)
		return fmt.Errorf("recycle: %w", err)
	}
	err = b.privately(func() error {
		ids := b.idMap(bx.rec)
		release, err := b.userNamespace(&ids)
		if err != nil {
			return err
		}
		defer release()
		bx.phases.mark("user namespace holder (fork+exec, maps)")
		if err := b.mountDisk(bx, tmpl, ids, true); err != nil {
			return fmt.Errorf("recycle: mount fresh disk: %w", err)
		}
		bx.phases.mark("disk: loop attach + mount ext4 + overlay")
		if err := b.boot(ctx, bx, tmpl, ids, net); err != nil {
			return fmt.Errorf("recycle: %w", err)
		}
		return nil
	})
	if err != nil {
		b.teardown(context.WithoutCancel(ctx), bx, false)
		_ = b.saveRecord(bx)
		return err
	}
	return b.saveRecycled(bx)
}

// forNextUser gives bx's record the spec the next user starts with: the
// pool's network policy, no env of the previous user, the new token.
func (bx *box) forNextUser(spec sandbox.Spec, req backend.RecycleRequest) {
	spec.Network = req.Network
	spec.Env = nil
	spec.AccessToken = ""
	bx.rec.Spec = spec
	bx.rec.AccessToken = req.AccessToken
}

// saveRecycled records bx as running, created now.
func (b *Backend) saveRecycled(bx *box) error {
	bx.rec.Stopped = false
	bx.rec.Reason = ""
	bx.rec.CreatedAt = time.Now().UTC()
	if err := b.saveRecord(bx); err != nil {
		return err
	}
	bx.phases.mark("record")
	return nil
}

// revokeAndReplaceDisk makes sure nothing still holds the sandbox's old disk
// (a loop device kept open would let it be read or written later), then
// replaces the image file with a fresh copy of the formatted template.
func (b *Backend) revokeAndReplaceDisk(bx *box, loopDev string) error {
	if err := revokeImage(bx.paths.image, bx.paths.dir, loopDev); err != nil {
		return fmt.Errorf("recycle: %w", err)
	}
	b.diskUse.removed(bx.paths.image)
	if err := os.Remove(bx.paths.image); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("recycle: remove old disk: %w", err)
	}
	if err := b.copyDiskTemplate(bx.rec.Spec.Resources.DiskBytes, bx.paths.image); err != nil {
		return fmt.Errorf("recycle: %w", err)
	}
	return nil
}
