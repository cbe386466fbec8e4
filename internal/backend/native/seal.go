package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/opencontainers/runc/libcontainer/exeseal"
)

const (
	sealedEnv  = "_AGENTBOX_SEALED_EXE"   // set after the re-exec, to stop a loop
	origExeEnv = "_AGENTBOX_ORIGINAL_EXE" // the binary's real path, for finding siblings
)

// SealSelf re-executes the current binary from a sealed in-memory copy of
// itself, once, at process start.
//
// libcontainer starts each sandbox by re-executing /proc/self/exe, and to
// stop a sandbox from overwriting the host binary through that magic link
// (CVE-2019-5736) it makes a sealed copy first — ~6 ms per sandbox. When the
// process already runs from a sealed memfd, libcontainer skips that, so
// paying for one copy at start makes every create faster.
//
// Call it first thing in main (and TestMain). It returns only when no
// re-exec happened (already sealed, or sealing failed: then libcontainer
// seals per sandbox, correct but slower).
func SealSelf() {
	if os.Getenv(sealedEnv) != "" || exeseal.IsSelfExeCloned() {
		if exeseal.IsSelfExeCloned() {
			nameAfterOriginal()
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return
	}
	st, err := self.Stat()
	if err != nil {
		self.Close()
		return
	}
	sealed, err := exeseal.CloneBinary(self, st.Size(), "/proc/self/exe", os.TempDir())
	self.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: cannot seal own binary, sandboxes start slower: %v\n", err)
		return
	}
	env := append(os.Environ(), sealedEnv+"=1", origExeEnv+"="+exe)
	err = syscall.Exec("/proc/self/fd/"+strconv.Itoa(int(sealed.Fd())), os.Args, env) //nolint:gosec // G702: re-executes this very binary from its sealed copy with its own arguments
	sealed.Close()
	fmt.Fprintf(os.Stderr, "agentbox: re-exec from sealed copy failed, sandboxes start slower: %v\n", err)
}

// nameAfterOriginal gives the process its binary's name back after the
// re-exec: the kernel names a process executed from /proc/self/fd/N "N",
// which is what ps, top and the OOM killer's log would show for the daemon.
// Only a numeric name is replaced, so the sandboxes' own inits (runc's
// clones, named for their memfd) keep theirs. Every thread is renamed: the
// Go runtime started some before main, and later ones copy their creator's.
func nameAfterOriginal() {
	orig := os.Getenv(origExeEnv)
	if orig == "" {
		return
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return
	}
	if _, err := strconv.Atoi(strings.TrimSpace(string(comm))); err != nil {
		return
	}
	name := filepath.Base(orig)
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		// A thread that exited meanwhile is no loss.
		_ = os.WriteFile("/proc/self/task/"+t.Name()+"/comm", []byte(name), 0)
	}
}

// Executable returns the path of the running binary on disk, also after
// SealSelf re-executed it from memory.
func Executable() (string, error) {
	// Only a process that runs from its sealed copy trusts the marker: one
	// that merely inherited it (a child of a sealed daemon) is on disk.
	if p := os.Getenv(origExeEnv); p != "" && exeseal.IsSelfExeCloned() {
		return p, nil
	}
	return os.Executable()
}
