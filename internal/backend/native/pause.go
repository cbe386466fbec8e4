package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opencontainers/runc/libcontainer"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/cgroupfs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ backend.Pauser = (*Backend)(nil)

// Pause implements backend.Pauser: every process of the sandbox is frozen
// by the cgroup freezer (v1 freezer.state or v2 cgroup.freeze), so its
// memory, open files and sockets stay exactly as they are and it uses no
// CPU. Listening sockets keep accepting connections into their backlog;
// nothing answers until Resume. The paused state is in the sandbox's
// record, so a restarted daemon keeps it paused (see recoverOne).
//
// While paused the sandbox's memory is made the kernel's first choice to
// reclaim (see pauseReclaim). Pausing a paused sandbox is not an error.
func (b *Backend) Pause(ctx context.Context, id sandbox.ID) error {
	if b.rootless {
		return sandbox.Errorf(sandbox.ClassUnavailable, "a rootless daemon has no cgroup freezer: sandboxes cannot be paused")
	}
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if isGVisor(bx.rec.Spec) {
		return errGVisor(id, "pause")
	}
	if bx.rec.Stopped || bx.container == nil {
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped; start it to pause it", id)
	}
	if bx.rec.Paused {
		return nil
	}
	// Persist first: a daemon that dies between the two finds a record
	// saying paused and re-applies the freeze (recoverOne), never a frozen
	// sandbox its record calls running, whose agent it could not reach.
	bx.rec.Paused = true
	if err := b.saveRecord(bx); err != nil {
		bx.rec.Paused = false
		return err
	}
	if err := bx.container.Pause(); err != nil {
		bx.rec.Paused = false
		if serr := b.saveRecord(bx); serr != nil {
			b.log.Error("save sandbox record", "sandbox", id, "err", serr)
		}
		return fmt.Errorf("freeze sandbox %s: %w", id, err)
	}
	b.pauseReclaim(bx)
	return nil
}

// Resume implements backend.Pauser: the memory settings changed at pause
// are restored, then every process is thawed. Resuming a running sandbox
// is not an error.
func (b *Backend) Resume(ctx context.Context, id sandbox.ID) error {
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.rec.Stopped || bx.container == nil {
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped; start it instead", id)
	}
	if !bx.rec.Paused {
		return nil
	}
	b.resumeReclaim(bx)
	if err := bx.container.Resume(); err != nil && !errors.Is(err, libcontainer.ErrNotPaused) {
		return fmt.Errorf("thaw sandbox %s: %w", id, err)
	}
	bx.rec.Paused = false
	return b.saveRecord(bx)
}

// thawForKill makes a frozen sandbox killable: on cgroup v1 a frozen task
// does not die of SIGKILL until it is thawed, and libcontainer refuses to
// destroy a paused container. The init gets its SIGKILL first, so when
// the cgroup thaws it dies at once (taking its pid namespace with it) and
// no sandbox code runs in between. Called with bx.mu held.
func (b *Backend) thawForKill(bx *box) {
	c := bx.container
	if c == nil {
		return
	}
	st, err := c.Status()
	if err != nil || st != libcontainer.Paused {
		return
	}
	_ = c.Signal(killSignal)
	// Thaw through the cgroup itself: once the init is dead libcontainer
	// calls the container stopped and will not resume it, while the rest
	// of its processes may still be frozen (depending on the kernel).
	if err := b.thawCgroup(bx); err != nil {
		b.log.Error("thaw paused sandbox to kill it", "sandbox", bx.id, "err", err)
	}
}

// thawCgroup writes the thawed state to the sandbox's freezer directly.
func (b *Backend) thawCgroup(bx *box) error {
	p := b.cgroupPaths(bx)
	file, val := filepath.Join(p["freezer"], "freezer.state"), "THAWED"
	if isCgroup2() {
		file, val = filepath.Join(p[""], "cgroup.freeze"), "0"
	}
	if err := os.WriteFile(file, []byte(val), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("thaw cgroup: %w", err)
	}
	return nil
}

// Memory of a paused sandbox.
//
// Without swap the kernel can only reclaim a frozen sandbox's page cache
// (clean file pages: files it read or wrote on its disk, its binaries and
// libraries); its anonymous memory (heaps, stacks) and tmpfs pages stay
// resident, because there is nowhere to put them. With swap both can be
// swapped out and come back on access after Resume. Nothing is lost
// either way: reclaim never kills a process (the OOM killer is only ever
// triggered by a sandbox's own allocations against its hard limit, and a
// frozen sandbox allocates nothing).
//
// So at pause:
//   - cgroup v1: the soft limit (memory.soft_limit_in_bytes) drops to 0,
//     which makes the sandbox the first cgroup the kernel reclaims from
//     when the host runs short of memory, and, when PauseReclaim is set,
//     memory.force_empty reclaims what it can at once;
//   - cgroup v2: memory.low is already 0 (no protection); with
//     PauseReclaim, memory.reclaim asks the kernel to reclaim the sandbox's
//     usage at once (it stops at what cannot be reclaimed).
//
// Resume puts the soft limit back before it thaws.

// pauseReclaim lowers the paused sandbox's memory priority. Failures are
// logged: the sandbox is paused either way.
func (b *Backend) pauseReclaim(bx *box) {
	p := b.cgroupPaths(bx)
	if isCgroup2() {
		if b.cfg.PauseReclaim {
			dir := p[""]
			if usage := cgroupfs.ReadInt(filepath.Join(dir, "memory.current")); usage > 0 {
				// EAGAIN when not all of it could be reclaimed: expected
				// without swap (anonymous memory stays).
				_ = os.WriteFile(filepath.Join(dir, "memory.reclaim"), []byte(strconv.FormatInt(usage, 10)), 0)
			}
		}
		return
	}
	mem := p["memory"]
	if mem == "" {
		return
	}
	soft := filepath.Join(mem, "memory.soft_limit_in_bytes")
	if err := os.WriteFile(soft, []byte("0"), 0); err != nil {
		b.log.Warn("lower paused sandbox's memory soft limit", "sandbox", bx.id, "err", err)
	}
	if b.cfg.PauseReclaim {
		// Returns once the kernel reclaimed what it could (EBUSY-free on a
		// cgroup with tasks; what cannot go without swap stays).
		_ = os.WriteFile(filepath.Join(mem, "memory.force_empty"), []byte("0"), 0)
	}
}

// resumeReclaim restores the memory settings pauseReclaim changed.
func (b *Backend) resumeReclaim(bx *box) {
	if isCgroup2() {
		return
	}
	mem := b.cgroupPaths(bx)["memory"]
	if mem == "" {
		return
	}
	// No soft limit is the default of a sandbox (libcontainer sets none).
	if err := os.WriteFile(filepath.Join(mem, "memory.soft_limit_in_bytes"), []byte("-1"), 0); err != nil {
		b.log.Warn("restore resumed sandbox's memory soft limit", "sandbox", bx.id, "err", err)
	}
}

// freezerState reads the sandbox's freezer state as the kernel reports it
// ("FROZEN", "THAWED", "FREEZING" on v1; "1"/"0" of cgroup.freeze on v2).
func (b *Backend) freezerState(bx *box) string {
	p := b.cgroupPaths(bx)
	var data []byte
	var err error
	if isCgroup2() {
		data, err = os.ReadFile(filepath.Join(p[""], "cgroup.freeze"))
	} else {
		data, err = os.ReadFile(filepath.Join(p["freezer"], "freezer.state"))
	}
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
