package native

import (
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"

	"github.com/opencontainers/runc/libcontainer/exeseal"
)

// initBinaryName is the small container-init binary (cmd/agentbox-init),
// looked for next to the agent binary. Its sealed copy is named
// "runc_cloned:agentbox-init", which the fastinit constructor checks.
const initBinaryName = "agentbox-init"

// initProtocolModules are the modules whose versions must match between the
// daemon and agentbox-init: libcontainer's parent and init sides talk a
// private protocol over the init and sync pipes.
var initProtocolModules = []string{"github.com/opencontainers/runc", "github.com/opencontainers/cgroups"}

// initStartedHook, when set (by tests), is called with the pid of each
// sandbox's init once it is set up and before it executes the agent.
var initStartedHook func(pid int)

var sealedInits struct {
	sync.Mutex
	byPath map[string]*os.File
}

// initBinary returns a sealed in-memory copy of the agentbox-init binary
// next to agentPath, made once per path for the life of the process, or nil
// with the reason when there is none to use: the sandbox's init then runs
// from the daemon binary, as libcontainer does by default (slower: see
// package fastinit).
//
// The copy is sealed against writes, like the daemon's own (SealSelf): a
// sandbox that reaches its init's /proc/<pid>/exe cannot rewrite the binary
// the next sandbox starts from (CVE-2019-5736).
func initBinary(agentPath string) (*os.File, error) {
	path := filepath.Join(filepath.Dir(agentPath), initBinaryName)
	sealedInits.Lock()
	defer sealedInits.Unlock()
	if f, ok := sealedInits.byPath[path]; ok {
		return f, nil
	}
	f, err := sealInitBinary(path)
	if err != nil {
		return nil, err
	}
	if sealedInits.byPath == nil {
		sealedInits.byPath = map[string]*os.File{}
	}
	sealedInits.byPath[path] = f
	return f, nil
}

func sealInitBinary(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	mem, seal, err := exeseal.Memfd(initBinaryName)
	if err != nil {
		return nil, fmt.Errorf("memfd for %s: %w", path, err)
	}
	if _, err := io.Copy(mem, src); err != nil {
		mem.Close()
		return nil, fmt.Errorf("copy %s: %w", path, err)
	}
	// Checked on the copy: what runs is what was checked.
	if err := sameInitProtocol(path, mem); err != nil {
		mem.Close()
		return nil, err
	}
	if err := seal(&mem); err != nil {
		mem.Close()
		return nil, fmt.Errorf("seal copy of %s: %w", path, err)
	}
	return mem, nil
}

// sameInitProtocol refuses an agentbox-init built against other versions of
// libcontainer than the daemon (a stale binary left from an upgrade). A
// binary without module information (a test binary: go test records none)
// cannot compare and trusts the agentbox-init of its own tree.
func sameInitProtocol(path string, bin io.ReaderAt) error {
	other, err := buildinfo.Read(bin)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	own, _ := debug.ReadBuildInfo()
	for _, mod := range initProtocolModules {
		a, b := moduleVersion(own, mod), moduleVersion(other, mod)
		if b == "" {
			return fmt.Errorf("%s was not built with %s", path, mod)
		}
		if a != "" && a != b {
			return fmt.Errorf("%s was built with %s %q, the daemon with %q", path, mod, b, a)
		}
	}
	return nil
}

func moduleVersion(bi *debug.BuildInfo, path string) string {
	if bi == nil {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil {
			return d.Replace.Path + "@" + d.Replace.Version + " " + d.Replace.Sum
		}
		return d.Version + " " + d.Sum
	}
	return ""
}
