package native

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ backend.Forker = (*Backend)(nil)

// The fork ioctls (linux/fs.h: _IOWR('X', 119, int) and 120): freeze a
// filesystem (write back everything dirty, block every new write) and
// thaw it.
const (
	ioctlFIFREEZE = 0xc0045877
	ioctlFITHAW   = 0xc0045878
)

// Fork implements backend.Forker: a fork is a create whose disk image is
// a copy of the source's, read while the source's ext4 filesystem is
// frozen (FIFREEZE: the kernel writes back all it holds and holds every
// new write until the thaw), so the copy is one consistent state of the
// source's disk — /workspace, the homes, an image template's writable
// root — with nothing half-written. The source's processes keep running;
// a write of theirs waits for the thaw. The copy is sparse: only written
// blocks are read. Its owners are then moved from the source's host id
// range to the fork's.
func (b *Backend) Fork(ctx context.Context, src sandbox.ID, spec sandbox.Spec) (sandbox.Info, error) {
	if b.rootless {
		return sandbox.Info{}, sandbox.Errorf(sandbox.ClassUnavailable, "a rootless daemon cannot fork sandboxes (their disks are plain directories)")
	}
	return b.create(ctx, spec, src)
}

// copyForkDisk copies sandbox src's disk image to dst, src's filesystem
// frozen meanwhile.
func (b *Backend) copyForkDisk(src sandbox.ID, spec sandbox.Spec, dst string) error {
	sb, err := b.lookup(src)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if isGVisor(sb.rec.Spec) || isGVisor(spec) {
		return errGVisor(src, "fork (its disk is not frozen and copied under runsc yet)")
	}
	if sb.rec.Stopped || sb.container == nil {
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped; start it to fork it", src)
	}
	if sb.rec.Spec.Template.Ref != spec.Template.Ref || diskBucket(sb.rec.Spec.Resources.DiskBytes) != spec.Resources.DiskBytes {
		return sandbox.Errorf(sandbox.ClassInvalid, "a fork of %s must have its template and disk size", src)
	}
	// The disk is mounted in the backend's private mount namespaces; the
	// daemon holds its root open (diskPath).
	disk, err := os.Open(sb.diskPath())
	if err != nil {
		return fmt.Errorf("fork: open the source's disk: %w", err)
	}
	defer disk.Close()
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, disk.Fd(), ioctlFIFREEZE, 0); errno != 0 {
		return fmt.Errorf("fork: freeze the source's disk: %w", errno)
	}
	copyErr := sparseCopy(sb.paths.image, dst)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, disk.Fd(), ioctlFITHAW, 0); errno != 0 {
		b.log.Error("fork: thaw the source's disk", "sandbox", src, "err", errno)
	}
	if copyErr != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("fork: copy the source's disk: %w", copyErr)
	}
	if b.cfg.DiskOvercommit <= 1 {
		if err := preallocate(dst, spec.Resources.DiskBytes); err != nil {
			_ = os.Remove(dst)
			return err
		}
	}
	return nil
}
