package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// A one-shot run holds a lock (flock) on a file named after its sandbox
// from before the sandbox exists until it is destroyed. A run that dies
// without destroying it (SIGKILL, the OOM killer, a crash) releases the
// lock with its last descriptor, and the next run finds the sandbox
// abandoned and removes it: with no daemon, nothing else would.

// ownerLock is a run's claim on its sandbox.
type ownerLock struct {
	f    *os.File
	path string
}

// lockOwner claims sandbox id for this process.
func lockOwner(dir string, id sandbox.ID) (*ownerLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("owner lock: %w", err)
	}
	path := filepath.Join(dir, string(id)+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("owner lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("owner lock %s: %w", path, err)
	}
	return &ownerLock{f: f, path: path}, nil
}

// release gives the claim up; call it once the sandbox is destroyed.
func (l *ownerLock) release() {
	os.Remove(l.path)
	l.f.Close()
}

// abandon lets the claim go but leaves its file, so that the next run
// reaps the sandbox.
func (l *ownerLock) abandon() { l.f.Close() }

// reapAbandoned destroys the sandboxes whose runs died before destroying
// them. A sandbox whose removal fails keeps its lock file, so a later run
// tries again.
func reapAbandoned(ctx context.Context, b *native.Backend, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".lock")
		id := sandbox.ID(name)
		if !ok || id.Validate() != nil {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if reapable(f, path) {
			if err := b.Reap(ctx, id); err != nil {
				slog.Warn("could not remove the sandbox of a run that died; the next run tries again", "sandbox", id, "err", err)
			} else {
				os.Remove(path)
			}
		}
		f.Close()
	}
}

// reapable takes the lock of f, open at path, and reports whether the
// sandbox it names is abandoned: no process holds the lock, and no run
// finished and removed the file since it was opened.
func reapable(f *os.File, path string) bool {
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false // its run is alive
	}
	var held, now unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &now) != nil {
		return false
	}
	return held.Dev == now.Dev && held.Ino == now.Ino
}
