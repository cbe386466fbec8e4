package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// lockFile takes an exclusive flock on path, waiting until ctx ends: two
// bootstraps of the same image run once, the second finds the first's
// tarball.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bootstrap cache lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("bootstrap cache lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("bootstrap: waiting for another bootstrap of the same image: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// newWorkDir makes a run directory under the cache's tmp, locked for as
// long as the run lasts so that removeStale can tell live runs from dead.
func newWorkDir(cache string) (string, func(), error) {
	work, err := os.MkdirTemp(filepath.Join(cache, "tmp"), "run-")
	if err != nil {
		return "", nil, fmt.Errorf("bootstrap: %w", err)
	}
	f, err := os.OpenFile(work+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.Remove(work)
		return "", nil, fmt.Errorf("bootstrap: lock work directory: %w", err)
	}
	return work, func() { f.Close(); os.Remove(work + ".lock") }, nil
}

// removeStale removes run directories that no live run holds (left by a
// daemon that died mid-bootstrap).
func removeStale(cache string, log *slog.Logger) {
	tmp := filepath.Join(cache, "tmp")
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "run-") {
			continue
		}
		// A run directory exists a moment before its lock does: leave
		// young ones alone.
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		work := filepath.Join(tmp, e.Name())
		f, err := os.OpenFile(work+".lock", os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			cleanupWork(work, log)
			os.Remove(work + ".lock")
		}
		f.Close()
	}
}

// cleanupWork removes a run directory, unless something is still mounted
// under it: mmdebstrap's mounts live in a namespace of their own, so one
// here means something unexpected, and removing through it could reach
// the host's /proc or /dev. It is then left for the operator, logged.
func cleanupWork(work string, log *slog.Logger) {
	if m := mountsUnder(work); len(m) > 0 {
		log.Error("bootstrap: work directory still has mounts; leaving it", "dir", work, "mounts", m)
		return
	}
	if err := os.RemoveAll(work); err != nil {
		log.Warn("bootstrap: remove work directory", "dir", work, "err", err)
	}
}

// mountsUnder lists mount points at or below dir in this mount namespace.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// prune keeps the keep most recently used tarballs (and always keep, the
// one just made), so the cache does not grow with every package list.
func prune(cache, keepPath string, keep int, log *slog.Logger) {
	if keep <= 0 {
		keep = DefaultKeep
	}
	matches, _ := filepath.Glob(filepath.Join(cache, "debian-*.tar"))
	type entry struct {
		path string
		mod  time.Time
	}
	var ents []entry
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.Mode().IsRegular() && m != keepPath {
			ents = append(ents, entry{m, fi.ModTime()})
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].mod.After(ents[j].mod) })
	for i, e := range ents {
		if i+1 < keep { // +1: keepPath counts
			continue
		}
		if err := os.Remove(e.path); err == nil {
			os.Remove(e.path + ".lock")
			log.Info("bootstrap cache: removed least recently used", "tarball", filepath.Base(e.path))
		}
	}
}
