package fake

import (
	"context"
	"syscall"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ backend.Pauser = (*Backend)(nil)

// Pause implements backend.Pauser by stopping the agent and every
// process it started (SIGSTOP): the sandbox then answers nothing and runs
// nothing, as a frozen one. Pausing a paused sandbox is not an error.
func (b *Backend) Pause(ctx context.Context, id sandbox.ID) error {
	b.count("pause")
	return b.setPaused(id, true)
}

// Resume implements backend.Pauser (SIGCONT to the same processes).
// Resuming a running sandbox is not an error.
func (b *Backend) Resume(ctx context.Context, id sandbox.ID) error {
	b.count("resume")
	return b.setPaused(id, false)
}

func (b *Backend) setPaused(id sandbox.ID, paused bool) error {
	bx, err := b.get(id)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if bx.cmd == nil {
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped", id)
	}
	sig, st := syscall.SIGCONT, sandbox.StateRunning
	if paused {
		sig, st = syscall.SIGSTOP, sandbox.StatePaused
	}
	if err := signalTree(bx.cmd.Process.Pid, sig); err != nil {
		return err
	}
	bx.info.State = st
	return nil
}
