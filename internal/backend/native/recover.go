package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Recover implements backend.Backend. It walks the sandbox directories a
// previous daemon left, reattaches to sandboxes whose agent still answers,
// stops those whose agent died (keeping their disk, so Start can boot them),
// and removes anything that is not a complete sandbox: half-created
// directories, orphan libcontainer state, cgroups and mounts.
func (b *Backend) Recover(ctx context.Context) ([]sandbox.Info, error) {
	entries, err := os.ReadDir(b.sbRoot)
	if err != nil {
		return nil, fmt.Errorf("read sandbox dir: %w", err)
	}
	known := map[string]bool{}
	var infos []sandbox.Info
	for _, e := range entries {
		id := sandbox.ID(e.Name())
		if !e.IsDir() || id.Validate() != nil {
			continue
		}
		b.mu.Lock()
		bx, live := b.boxes[id]
		b.mu.Unlock()
		if live {
			known[string(id)] = true
			bx.mu.Lock()
			infos = append(infos, b.infoLocked(bx))
			bx.mu.Unlock()
			continue
		}
		info, ok := b.recoverOne(ctx, id)
		if ok {
			known[string(id)] = true
			infos = append(infos, info)
		}
	}
	b.removeOrphans(known)
	b.removeOrphanDisks(known)
	if b.cfg.Network != nil {
		var live []sandbox.ID
		for _, in := range infos {
			// A paused sandbox keeps its network for when it resumes.
			up := in.State == sandbox.StateRunning || in.State == sandbox.StatePaused
			if up && in.Spec.Network.Mode == sandbox.NetworkEgress {
				live = append(live, in.ID)
			}
		}
		if err := b.cfg.Network.Reconcile(ctx, live); err != nil {
			return nil, fmt.Errorf("reconcile sandbox networking: %w", err)
		}
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].CreatedAt.Before(infos[j].CreatedAt) })
	return infos, nil
}

func (b *Backend) recoverOne(ctx context.Context, id sandbox.ID) (sandbox.Info, bool) {
	bx := &box{id: id, paths: newBoxPaths(b.sbRoot, b.diskRoot, id)}
	log := b.log.With("sandbox", id)
	data, err := os.ReadFile(bx.paths.record)
	if err == nil {
		err = json.Unmarshal(data, &bx.rec)
	}
	if err != nil || bx.rec.Spec.ID != id {
		log.Warn("removing incomplete sandbox", "err", err)
		b.teardown(ctx, bx, true)
		return sandbox.Info{}, false
	}
	if bx.rec.HostIDBase != 0 {
		b.idRanges.reserve(bx.rec.HostIDBase, id)
	}
	if err := b.CheckTemplate(bx.rec.Spec.Template); err != nil {
		log.Warn("removing sandbox whose template is gone", "err", err)
		b.teardown(ctx, bx, true)
		return sandbox.Info{}, false
	}
	if bx.rec.Spec.Template.Kind == sandbox.TemplateHost {
		bx.paths.rootfs = filepath.Join(bx.paths.disk, "rootfs")
	} else {
		bx.paths.rootfs = bx.paths.overlay
	}
	if _, err := os.Stat(bx.paths.image); err != nil && !b.rootless {
		log.Warn("removing sandbox without a disk", "err", err)
		b.teardown(ctx, bx, true)
		return sandbox.Info{}, false
	}

	if !bx.rec.Stopped {
		if b.reattach(bx) {
			log.Info("reattached sandbox", "pid", bx.pid)
		} else {
			log.Warn("sandbox agent is gone; stopping it")
			b.teardown(ctx, bx, false)
			bx.rec.Stopped = true
			bx.rec.Reason = "agent was not running when the daemon restarted"
			if err := b.saveRecord(bx); err != nil {
				log.Error("save record", "err", err)
			}
		}
	} else {
		// A stopped sandbox owns no processes, cgroups or mounts.
		b.teardown(ctx, bx, false)
	}
	bx.stopping = false
	b.mu.Lock()
	b.boxes[id] = bx
	b.mu.Unlock()
	return b.infoLocked(bx), true
}

// reattach loads the libcontainer state of a running sandbox and checks that
// its agent answers. It watches the init with a pidfd from then on.
func (b *Backend) reattach(bx *box) bool {
	if isGVisor(bx.rec.Spec) {
		return b.reattachGVisor(bx)
	}
	c, err := libcontainer.Load(b.stateRoot, string(bx.id))
	if err != nil {
		return false
	}
	bx.container = c
	st, err := c.Status()
	if err != nil || (st != libcontainer.Running && st != libcontainer.Paused) {
		return false
	}
	// The freezer follows the record: a daemon that died between saving
	// "paused" and freezing (or thawing and saving) left them apart, and a
	// snapshot's short freeze must not outlive the daemon that took it.
	switch {
	case bx.rec.Paused && st == libcontainer.Running:
		if err := c.Pause(); err != nil {
			b.log.Error("freeze paused sandbox again", "sandbox", bx.id, "err", err)
			return false
		}
		b.pauseReclaim(bx)
	case !bx.rec.Paused && st == libcontainer.Paused:
		b.resumeReclaim(bx)
		if err := c.Resume(); err != nil {
			b.log.Error("thaw sandbox left frozen", "sandbox", bx.id, "err", err)
			return false
		}
	}
	state, err := c.State()
	if err != nil {
		return false
	}
	if !bx.rec.Paused {
		// A frozen agent cannot answer; its init is alive (the pidfd
		// below), which is all a paused sandbox needs to be resumable.
		conn, err := net.DialTimeout("unix", bx.paths.socket(), 2*time.Second)
		if err != nil {
			return false
		}
		conn.Close()
	}
	pidfd, err := unix.PidfdOpen(state.InitProcessPid, 0)
	if err != nil {
		return false
	}
	bx.pid = state.InitProcessPid
	bx.exited = make(chan struct{})
	go b.watchPidfd(bx, pidfd, bx.exited)
	if err := b.reopenDisk(bx); err != nil {
		// The sandbox runs; only the daemon's view of its disk (usage,
		// snapshots) is missing.
		b.log.Error("reopen sandbox disk after restart", "sandbox", bx.id, "err", err)
	}
	return true
}

// removeOrphans removes libcontainer state, cgroups and mounts under the
// backend's root that belong to no known sandbox.
func (b *Backend) removeOrphans(known map[string]bool) {
	b.removeOrphanRunsc(known)
	if entries, err := os.ReadDir(b.stateRoot); err == nil {
		for _, e := range entries {
			if known[e.Name()] {
				continue
			}
			b.log.Warn("removing orphan container state", "id", e.Name())
			if c, err := libcontainer.Load(b.stateRoot, e.Name()); err == nil {
				_ = c.Signal(unix.SIGKILL)
				_ = c.Destroy()
			}
			_ = os.RemoveAll(filepath.Join(b.stateRoot, e.Name()))
		}
	}
	for _, id := range b.cgroupChildren() {
		if !known[id] {
			b.log.Warn("removing orphan cgroup", "id", id)
			b.removeStaleCgroups(id)
		}
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(b.sbRoot + "/"))
	if err != nil {
		return
	}
	// Deepest first, so nested mounts go before their parents.
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	for _, m := range mounts {
		rel := strings.TrimPrefix(m.Mountpoint, b.sbRoot+"/")
		id := strings.SplitN(rel, "/", 2)[0]
		if known[id] {
			continue
		}
		b.log.Warn("removing orphan mount", "path", m.Mountpoint)
		if err := unmountAll(m.Mountpoint); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.log.Error("unmount orphan", "path", m.Mountpoint, "err", err)
		}
	}
}

// removeOrphanDisks deletes disk images no sandbox state refers to: what a
// reboot leaves (the state tmpfs is gone, the images are not).
func (b *Backend) removeOrphanDisks(known map[string]bool) {
	entries, err := os.ReadDir(b.diskRoot)
	if err != nil {
		return
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok || known[id] {
			continue
		}
		b.log.Warn("removing orphan disk image", "id", id)
		_ = os.Remove(filepath.Join(b.diskRoot, e.Name()))
	}
}

// Reap removes sandbox id and everything of it on this host (init,
// cgroups, mounts, disk, state), in whatever state its creator left it:
// a sandbox another process of this backend's root created and can no
// longer destroy, such as a one-shot run that was killed. The caller
// makes sure no live process owns it; unlike Recover, Reap touches no
// other sandbox.
func (b *Backend) Reap(ctx context.Context, id sandbox.ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	b.mu.Lock()
	_, live := b.boxes[id]
	b.mu.Unlock()
	if live {
		return fmt.Errorf("native: reap %s: the sandbox is this backend's own", id)
	}
	// An incomplete sandbox is removed by recoverOne itself.
	if _, ok := b.recoverOne(ctx, id); !ok {
		return nil
	}
	return b.Destroy(ctx, id)
}
