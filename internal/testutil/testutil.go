// Package testutil holds helpers shared by tests that start real sandboxes.
package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
	agentTmp  string
)

// AgentBinary returns the path of a static agentbox-agent binary: the one
// named by AGENTBOX_AGENT_PATH (set by the Makefile), or one built once per
// test process, with agentbox-init next to it. Call Cleanup from TestMain to remove a built one.
func AgentBinary(t testing.TB) string {
	t.Helper()
	agentOnce.Do(func() {
		if p := os.Getenv("AGENTBOX_AGENT_PATH"); p != "" {
			if _, err := os.Stat(p); err == nil { //nolint:gosec // G703: a test binary path the Makefile sets
				agentPath = p
				return
			}
		}
		root, err := ModuleRoot()
		if err != nil {
			agentErr = err
			return
		}
		agentTmp, err = os.MkdirTemp("", "agentbox-agent-")
		if err != nil {
			agentErr = err
			return
		}
		// 0755 so root sandboxes' mapped uids can reach the bind-mount source.
		_ = os.Chmod(agentTmp, 0o755)
		out := filepath.Join(agentTmp, "agentbox-agent")
		cmd := exec.Command("go", "build", "-o", out, "./cmd/agentbox-agent")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build agent: %w: %s", err, b)
			return
		}
		// The sandboxes' init binary goes next to it, where the native
		// backend looks for it.
		cmd = exec.Command("go", "build", "-o", filepath.Join(agentTmp, "agentbox-init"), "./cmd/agentbox-init")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build init: %w: %s", err, b)
			return
		}
		// So does the exec shim the backends mount beside the agent.
		if err := BuildShim(root, filepath.Join(agentTmp, "agentbox-shim")); err != nil {
			agentErr = err
			return
		}
		agentPath = out
	})
	if agentErr != nil {
		t.Fatalf("agent binary: %v", agentErr)
	}
	return agentPath
}

// BuildShim compiles agentbox-shim (cmd/agentbox-shim, C) from the module
// at root into out, as make build does.
func BuildShim(root, out string) error {
	cmd := exec.Command("cc", "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", out, "cmd/agentbox-shim/shim.c")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build agentbox-shim: %w: %s", err, b)
	}
	return nil
}

// ShimBinary returns agentbox-shim next to the agent binary of
// AgentBinary, failing the test when it is not there.
func ShimBinary(t testing.TB) string {
	t.Helper()
	p := filepath.Join(filepath.Dir(AgentBinary(t)), "agentbox-shim")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("agentbox-shim: %v (make build puts it next to the agent)", err)
	}
	return p
}

// Cleanup removes what AgentBinary built. Call it from TestMain after m.Run.
func Cleanup() {
	if agentTmp != "" {
		os.RemoveAll(agentTmp)
	}
}

// ModuleRoot returns the directory holding go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the agentbox module")
	}
	return filepath.Dir(mod), nil
}

// RequireRoot skips the test unless it runs as root with the kernel
// features sandboxes need.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: namespaces, cgroups and loop devices (run make test as root)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("needs /dev/loop-control for sandbox disks")
	}
}

// ShortTempDir returns a fresh directory under /tmp with a short path (unix
// socket paths are limited to 107 bytes, and t.TempDir paths can be long),
// removed when the test ends.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "abx")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o711)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads (a
// subprocess's output read while it runs).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Runsc returns gVisor's runsc for the gVisor isolation level's tests:
// AGENTBOX_RUNSC when set, else the pinned build in the test cache, built
// there by scripts/runsc.sh when missing (a few minutes, once per pin).
// It skips t, saying why, only when there is none and none can be built.
func Runsc(t testing.TB) string {
	t.Helper()
	runscOnce.Do(func() {
		if p := os.Getenv("AGENTBOX_RUNSC"); p != "" {
			runscPath = p
			return
		}
		root, err := ModuleRoot()
		if err != nil {
			runscErr = err
			return
		}
		// --path is cheap and never builds; the build runs only when the
		// pinned binary is not in the cache yet.
		script := filepath.Join(root, "scripts", "runsc.sh")
		out, err := exec.Command(script, "--path").Output()
		if err != nil {
			runscErr = fmt.Errorf("scripts/runsc.sh --path: %w", err)
			return
		}
		p := strings.TrimSpace(string(out))
		if _, err := os.Stat(p); err != nil {
			cmd := exec.Command(script)
			cmd.Stderr = os.Stderr
			if out, err = cmd.Output(); err != nil {
				runscErr = fmt.Errorf("runsc is not in the test cache and scripts/runsc.sh could not build it: %w", err)
				return
			}
			p = strings.TrimSpace(string(out))
		}
		runscPath = p
	})
	if runscErr != nil {
		t.Skipf("no runsc for the gVisor isolation level: %v", runscErr)
	}
	return runscPath
}

var (
	runscOnce sync.Once
	runscPath string
	runscErr  error
)
