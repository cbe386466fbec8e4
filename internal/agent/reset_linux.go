package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The warm reset: a host resets a used sandbox for its next user without
// stopping the sandbox's init (this agent, PID 1), in two calls.
//
//	POST /reset/kill   every other process of the sandbox is killed, every
//	                   other connection to the agent cut and its requests
//	                   waited for, and the memory file systems (/tmp, /run,
//	                   /dev/shm, /dev) go back to what they held at start;
//	POST /reset/renew  a new generation of the server takes over: built
//	                   from the start configuration with the new access
//	                   token, it shares nothing with the previous one (env
//	                   set by /init, code contexts, processes, PTYs,
//	                   watchers, exec shims are the old generation's, which
//	                   is dropped).
//
// In between the host checks what only it can see (the cgroup holds the
// agent alone, the mount table is unchanged) and resets the sandbox's
// disk, IPC objects, host name and sockets. Both routes answer only to the
// control token the host passed at start (AGENTBOX_CONTROL_TOKEN), never
// to the sandbox's access token: its user holds that one.

// ResetConfig enables the reset routes.
type ResetConfig struct {
	// ControlToken authenticates the host's reset calls (X-Agentbox-Control).
	ControlToken string
}

// memoryDirs are the tmpfs mounts a sandbox starts with, emptied by a reset.
var memoryDirs = []string{"/tmp", "/run", "/dev/shm"}

// resetState is what the agent saw at start, which a reset restores.
type resetState struct {
	control [32]byte
	// dev lists /dev's entries at start (name → type and, for links,
	// target): runc's device nodes, links and mount points.
	dev map[string]string
	// roots holds the owner, mode and extended attributes of /dev and each
	// memory directory at start.
	roots map[string]string
	// memoryOK is false when a memory directory was not empty at start.
	memoryOK bool
}

func (s *Server) mountReset(cfg *ResetConfig) {
	if cfg == nil || cfg.ControlToken == "" {
		return
	}
	st := &resetState{control: sha256.Sum256([]byte(cfg.ControlToken)), memoryOK: true}
	st.dev, _ = listDev()
	st.roots = memoryRoots()
	for _, d := range memoryDirs {
		if ents, err := os.ReadDir(d); err == nil && len(ents) > 0 {
			st.memoryOK = false
		}
	}
	s.mountResetRoutes(st)
}

// mountResetRoutes adds the reset routes, which restore st (the state of
// the first generation's start).
func (s *Server) mountResetRoutes(st *resetState) {
	s.reset = st
	s.mux.HandleFunc("POST /reset/kill", s.handleResetKill)
	s.mux.HandleFunc("POST /reset/renew", s.handleResetRenew)
}

// isControl reports whether r carries the control token.
func (s *Server) isControl(r *http.Request) bool {
	if s.reset == nil {
		return false
	}
	got := sha256.Sum256([]byte(r.Header.Get("X-Agentbox-Control")))
	return subtle.ConstantTimeCompare(got[:], s.reset.control[:]) == 1
}

func (s *Server) handleResetKill(w http.ResponseWriter, r *http.Request) {
	if !s.isControl(r) {
		writeError(w, http.StatusForbidden, "reset needs the host's control token")
		return
	}
	if s.cfg.Service != nil {
		// Its service would have to start again: the full reset does.
		writeError(w, http.StatusConflict, "reset: a sandbox with a service is reset in full")
		return
	}
	if err := s.killAllButSelf(5 * time.Second); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// No request of the previous user may act after the host empties the
	// disk: cut every other connection and wait for their handlers (their
	// processes are dead, so none waits on one).
	self, _ := r.Context().Value(connKey{}).(net.Conn)
	s.front.conns.closeAllBut(self)
	if err := s.waitAlone(2 * time.Second); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// Once more: a request that was past its check of closing when the
	// first sweep ran may have started a process before it ended.
	if err := s.killAllButSelf(time.Second); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := s.resetMemoryDirs(); err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleResetRenew(w http.ResponseWriter, r *http.Request) {
	if !s.isControl(r) {
		writeError(w, http.StatusForbidden, "reset needs the host's control token")
		return
	}
	var req struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if req.AccessToken == "" {
		writeError(w, http.StatusBadRequest, "access_token: required")
		return
	}
	if !s.killed.Load() {
		writeError(w, http.StatusConflict, "POST /reset/kill first")
		return
	}
	cfg := s.cfg
	cfg.AccessToken = req.AccessToken
	cfg.Reset = nil // the routes restore the first start's state, below
	cfg.DeferShims = true
	next := newServer(cfg)
	next.front = s.front
	next.mountResetRoutes(s.reset)
	s.front.active.Store(next)
	next.StartShims()
	// The sandbox goes back to a warm pool: its next user's first command
	// need not wait for a shim (agentbox-shim is otherwise started on
	// demand; see Config.ShimExternal).
	if next.shims != nil {
		next.shims.prestart()
	}
	w.WriteHeader(http.StatusNoContent)
}

// killAllButSelf SIGKILLs every process of the sandbox's pid namespace but
// PID 1 until none is left (zombies reaped included). Only PID 1 may: for
// any other process kill(-1) would reach beyond the sandbox.
func (s *Server) killAllButSelf(timeout time.Duration) error {
	if os.Getpid() != 1 {
		return errors.New("reset: the agent is not PID 1 of its sandbox")
	}
	// From here on this generation starts nothing again: no service
	// restart, no shim kept ready, no watcher, no process.
	s.closing.Store(true)
	s.killed.Store(true)
	s.pollWatchers.closeAll()
	if s.shims != nil {
		s.shims.close()
	}
	deadline := time.Now().Add(timeout)
	for {
		// ESRCH: nothing left to signal.
		if err := unix.Kill(-1, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("reset: kill(-1): %w", err)
		}
		others, err := otherProcesses()
		if err != nil {
			return err
		}
		if others == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reset: %d processes still there after %s", others, timeout)
		}
		s.reaper.reap()
		time.Sleep(50 * time.Microsecond)
	}
}

// waitAlone waits until the calling request is the only one being handled.
func (s *Server) waitAlone(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for s.front.inflight.Load() > 1 {
		if time.Now().After(deadline) {
			return fmt.Errorf("reset: %d requests still being handled after %s", s.front.inflight.Load()-1, timeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

// otherProcesses counts the processes (zombies included) /proc lists
// besides PID 1; /proc is the sandbox's, so that is its whole pid namespace.
func otherProcesses() (int, error) {
	f, err := os.Open("/proc")
	if err != nil {
		return 0, fmt.Errorf("reset: list processes: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("reset: list processes: %w", err)
	}
	n := 0
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid != 1 {
			n++
		}
	}
	return n, nil
}

// resetMemoryDirs empties /tmp, /run and /dev/shm and removes what was
// added to /dev. A /dev entry changed or removed since the start (a root
// sandbox user may) cannot be put back from here: that is an error, and
// the host falls back to a full reset.
func (s *Server) resetMemoryDirs() error {
	if !s.reset.memoryOK {
		return errors.New("reset: a memory directory was not empty at start")
	}
	for dir, was := range memoryRoots() {
		if s.reset.roots[dir] != was {
			return fmt.Errorf("reset: owner, mode or attributes of %s changed", dir)
		}
	}
	for _, d := range memoryDirs {
		if err := emptyDir(d); err != nil {
			return err
		}
	}
	now, err := listDev()
	if err != nil {
		return err
	}
	for name, kind := range now {
		was, ok := s.reset.dev[name]
		switch {
		case !ok:
			if err := os.RemoveAll(filepath.Join("/dev", name)); err != nil {
				return fmt.Errorf("reset: remove /dev/%s: %w", name, err)
			}
		case was != kind:
			return fmt.Errorf("reset: /dev/%s changed", name)
		}
	}
	for name := range s.reset.dev {
		if _, ok := now[name]; !ok {
			return fmt.Errorf("reset: /dev/%s was removed", name)
		}
	}
	return nil
}

// emptyDir removes everything in dir (RemoveAll never follows links).
func emptyDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("reset: open %s: %w", dir, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("reset: list %s: %w", dir, err)
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("reset: empty %s: %w", dir, err)
		}
	}
	return nil
}

// listDev maps /dev's entries to their type, inode and link target.
func listDev() (map[string]string, error) {
	ents, err := os.ReadDir("/dev")
	if err != nil {
		return nil, fmt.Errorf("reset: list /dev: %w", err)
	}
	m := make(map[string]string, len(ents))
	for _, e := range ents {
		var st unix.Stat_t
		p := filepath.Join("/dev", e.Name())
		if err := unix.Lstat(p, &st); err != nil {
			return nil, fmt.Errorf("reset: stat %s: %w", p, err)
		}
		kind := fmt.Sprintf("%o:%d:%d:%d", st.Mode, st.Ino, st.Uid, st.Rdev)
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ := os.Readlink(p)
			kind += ":" + target
		}
		m[e.Name()] = kind
	}
	return m, nil
}

// memoryRoots describes /dev and the memory directories themselves: owner,
// mode and the names of their extended attributes.
func memoryRoots() map[string]string {
	m := map[string]string{}
	for _, d := range append([]string{"/dev"}, memoryDirs...) {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			m[d] = "error: " + err.Error()
			continue
		}
		buf := make([]byte, 4096)
		n, err := unix.Llistxattr(d, buf)
		attrs := ""
		if err != nil && !errors.Is(err, unix.ENOTSUP) {
			attrs = "error: " + err.Error()
		} else if n > 0 {
			attrs = string(buf[:n])
		}
		m[d] = fmt.Sprintf("%o:%d:%d:%d:%q", st.Mode, st.Uid, st.Gid, st.Ino, attrs)
	}
	return m
}
