package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// watchChild reaps the init process when it is our child and handles an
// unexpected exit.
func (b *Backend) watchChild(bx *box, proc *libcontainer.Process, exited chan struct{}) {
	if pid, err := proc.Pid(); err == nil {
		// Wait parks in waitid(2), which holds an OS thread for the
		// sandbox's whole life: one daemon thread per sandbox. Wait for the
		// exit on the netpoller first; the reap below then returns at once.
		awaitExit(pid)
	}
	state, err := proc.Wait()
	reason := "agent exited"
	exit := backend.AgentExit{Code: -1}
	if state != nil {
		reason = "agent exited: " + state.String()
		exit.Code = state.ExitCode()
		if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Code, exit.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
		}
	} else if err != nil {
		reason = "agent exited: " + err.Error()
	}
	close(exited)
	b.onInitExit(bx, exited, reason, exit)
}

// watchPidfd waits for a recovered init (not our child) to exit.
func (b *Backend) watchPidfd(bx *box, pidfd int, exited chan struct{}) {
	awaitPidfd(pidfd)
	close(exited)
	b.onInitExit(bx, exited, "agent exited", backend.AgentExit{Code: -1})
}

// onInitExit cleans up after an init that died on its own (OOM-killed agent,
// a bug): the sandbox becomes stopped, with no processes, cgroups or mounts.
func (b *Backend) onInitExit(bx *box, exited chan struct{}, reason string, exit backend.AgentExit) {
	if b.abandoned.Load() {
		return
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.stopping || bx.exited != exited {
		return // a deliberate stop, or an older incarnation
	}
	if n := b.oomKills(bx); n > 0 {
		reason += " (out of memory)"
		exit.OOMKilled = true
	}
	bx.lastExit = &exit
	// The agent's log lives on the sandbox disk, which teardown unmounts:
	// keep its tail in our own log.
	b.log.Warn("sandbox init exited unexpectedly", "sandbox", bx.id, "reason", reason, "agent_log", logTail(bx.diskPath("agent.log")))
	b.teardown(context.Background(), bx, false)
	bx.rec.Stopped = true
	bx.rec.Reason = reason
	if err := b.saveRecord(bx); err != nil {
		b.log.Error("save sandbox record", "sandbox", bx.id, "err", err)
	}
	if fn := b.onExit.Load(); fn != nil {
		go (*fn)(bx.id, reason) // not under bx.mu: the callee may call us
	}
}

// LastExit implements backend.ExitReporter.
func (b *Backend) LastExit(_ context.Context, id sandbox.ID) (backend.AgentExit, bool) {
	bx, err := b.lookup(id)
	if err != nil {
		return backend.AgentExit{}, false
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.lastExit == nil {
		return backend.AgentExit{}, false
	}
	return *bx.lastExit, true
}

// OnAgentExit implements backend.ExitWatcher.
func (b *Backend) OnAgentExit(fn func(id sandbox.ID, reason string)) {
	b.onExit.Store(&fn)
}

// teardown kills the sandbox and removes its runtime state: processes,
// cgroups, network, mounts. With removeAll it also removes the sandbox's
// directory (disk image included). Errors are logged: teardown must get as
// far as it can.
func (b *Backend) teardown(ctx context.Context, bx *box, removeAll bool) {
	bx.stopping = true
	bx.warm, bx.statsZero = nil, nil
	bx.closeLimitFiles() // their cgroups are removed below
	if isGVisor(bx.rec.Spec) {
		b.teardownGVisor(ctx, bx)
	} else if bx.container == nil {
		if c, err := libcontainer.Load(b.stateRoot, string(bx.id)); err == nil {
			bx.container = c
		}
	}
	if c := bx.container; c != nil {
		b.thawForKill(bx)
		_ = c.Signal(killSignal)
		if bx.exited != nil {
			select {
			case <-bx.exited:
			case <-time.After(10 * time.Second):
				b.log.Error("sandbox init did not exit after SIGKILL", "sandbox", bx.id)
			}
		}
		bx.phases.mark("SIGKILL init, wait for its exit")
		b.reclaimBeforeRemove(bx)
		bx.phases.mark("reclaim the cgroup's page cache")
		// Destroy kills whatever is left in the cgroup and removes it, and the
		// container's state directory.
		if err := c.Destroy(); err != nil {
			b.log.Error("destroy container", "sandbox", bx.id, "err", err)
		}
		bx.container = nil
		bx.phases.mark("libcontainer Destroy (cgroups, state)")
	} else {
		b.removeStaleCgroups(string(bx.id))
	}
	_ = os.RemoveAll(filepath.Join(b.stateRoot, string(bx.id)))
	bx.pid = 0
	bx.rec.Paused = false
	if bx.rec.Spec.Network.Mode != "" && bx.rec.Spec.Network.Mode != sandbox.NetworkNone && b.cfg.Network != nil {
		if err := b.cfg.Network.Teardown(ctx, bx.id); err != nil {
			b.log.Error("tear down network", "sandbox", bx.id, "err", err)
		}
	}
	bx.phases.mark("network teardown")
	for _, m := range []string{bx.paths.overlay, bx.paths.disk, netnsSysfsDir(bx.paths)} {
		if err := unmountAll(m); err != nil {
			b.log.Error("unmount", "sandbox", bx.id, "path", m, "err", err)
		}
	}
	// With the sandbox dead, this is the disk's last holder: the disk is
	// unmounted when it closes (see mountns.go).
	bx.closeDisk()
	_ = os.Remove(bx.paths.socket())
	bx.phases.mark("unmount overlay + disk")
	if removeAll && !b.rootless {
		if err := revokeImage(bx.paths.image, bx.paths.dir, bx.loopDev); err != nil {
			b.log.Error("revoke disk held outside the sandbox", "sandbox", bx.id, "err", err)
		}
		bx.phases.mark("revoke check (is the disk's loop device still held?)")
	}
	if removeAll {
		if err := os.RemoveAll(bx.paths.dir); err != nil {
			b.log.Error("remove sandbox dir", "sandbox", bx.id, "err", err)
		}
		b.diskUse.removed(bx.paths.image) // its blocks become free space
		err := os.Remove(bx.paths.image)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			b.log.Error("remove sandbox disk", "sandbox", bx.id, "err", err)
		} else if bx.rec.HostIDBase != 0 {
			// Its files are gone with the disk: the range may serve another.
			b.idRanges.free(bx.rec.HostIDBase, bx.id)
		}
		bx.phases.mark("remove sandbox dir + disk image")
	}
	bx.loopDev = ""
}

func (b *Backend) lookup(id sandbox.ID) (*box, error) {
	if err := id.Validate(); err != nil {
		return nil, sandbox.ErrNotFound(id)
	}
	b.mu.Lock()
	bx, ok := b.boxes[id]
	b.mu.Unlock()
	if !ok {
		return nil, sandbox.ErrNotFound(id)
	}
	return bx, nil
}

// Stop implements backend.Backend.
func (b *Backend) Stop(ctx context.Context, id sandbox.ID) error {
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.rec.Stopped {
		return nil
	}
	b.teardown(ctx, bx, false)
	bx.rec.Stopped = true
	bx.rec.Reason = "stopped"
	return b.saveRecord(bx)
}

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if !bx.rec.Stopped {
		return b.infoLocked(bx), nil
	}
	tmpl := bx.rec.Spec.Template
	if err := b.CheckTemplate(tmpl); err != nil {
		return sandbox.Info{}, sandbox.Wrap(sandbox.ClassConflict, err, "template of stopped sandbox is gone")
	}
	net, err := b.setupNetwork(ctx, bx)
	if err != nil {
		b.teardown(context.WithoutCancel(ctx), bx, false)
		return sandbox.Info{}, err
	}
	err = b.privately(func() error {
		ids := b.idMap(bx.rec)
		release, err := b.userNamespace(&ids)
		if err != nil {
			return err
		}
		defer release()
		if err := b.mountDisk(bx, tmpl, ids, false); err != nil {
			return err
		}
		return b.boot(ctx, bx, tmpl, ids, net)
	})
	if err != nil {
		b.teardown(context.WithoutCancel(ctx), bx, false)
		return sandbox.Info{}, err
	}
	bx.rec.Stopped = false
	bx.rec.Reason = ""
	if err := b.saveRecord(bx); err != nil {
		return sandbox.Info{}, err
	}
	return b.infoLocked(bx), nil
}

// Destroy implements backend.Backend.
func (b *Backend) Destroy(ctx context.Context, id sandbox.ID) error {
	if err := id.Validate(); err != nil {
		return nil // nothing with such an id can exist
	}
	b.mu.Lock()
	bx, ok := b.boxes[id]
	b.mu.Unlock()
	if !ok {
		return nil
	}
	bx.mu.Lock()
	bx.phases = startPhases(ctx, b.cfg.PhaseObserver, "destroy")
	b.teardown(ctx, bx, true)
	bx.phases = nil
	bx.mu.Unlock()
	b.mu.Lock()
	if b.boxes[id] == bx {
		delete(b.boxes, id)
	}
	b.mu.Unlock()
	return nil
}

// Inspect implements backend.Backend.
func (b *Backend) Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return b.infoLocked(bx), nil
}

func (b *Backend) infoLocked(bx *box) sandbox.Info {
	spec := bx.rec.Spec
	spec.AccessToken = ""
	info := sandbox.Info{
		ID:        bx.id,
		Spec:      spec,
		CreatedAt: bx.rec.CreatedAt,
		Pid:       bx.pid,
		Agent:     sandbox.Endpoint{Network: "unix", Address: bx.paths.socket()},
		State:     sandbox.StateRunning,
		Reason:    bx.rec.Reason,
	}
	if bx.rec.Stopped {
		info.State = sandbox.StateStopped
		info.Pid = 0
	} else if bx.rec.Paused {
		info.State = sandbox.StatePaused
	}
	return info
}

// stateReserve is room on the state tmpfs that new sandboxes leave free,
// for the records and runtime state of sandboxes already there (stop,
// start, a create in flight).
const stateReserve = 4 << 20

func (b *Backend) saveRecord(bx *box) error {
	data, err := json.Marshal(bx.rec)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bx.paths.record); errors.Is(err, os.ErrNotExist) {
		if err := b.checkStateRoom(int64(len(data))); err != nil {
			return err
		}
	}
	tmp := bx.paths.record + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, unix.ENOSPC) {
			return sandbox.Wrap(sandbox.ClassQuota, err, "the server's sandbox state storage is full; try again when sandboxes were deleted")
		}
		return fmt.Errorf("write sandbox record: %w", err)
	}
	if err := os.Rename(tmp, bx.paths.record); err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	return nil
}

// checkStateRoom refuses a new sandbox whose record would eat into the
// state tmpfs's reserve.
func (b *Backend) checkStateRoom(need int64) error {
	if b.rootless {
		return nil // no tmpfs: the state lives in the data dir
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(b.runRoot, &fs); err != nil {
		return fmt.Errorf("statfs state dir: %w", err)
	}
	free := int64(fs.Bavail) * fs.Bsize
	if free < need+stateReserve {
		return sandbox.Errorf(sandbox.ClassQuota, "the server's sandbox state storage is full (%d KiB free, %d KiB kept in reserve); try again when sandboxes were deleted", free>>10, stateReserve>>10)
	}
	return nil
}
