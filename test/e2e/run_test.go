package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestRunOneShot runs `agentbox run` as a user would: the command's output
// and exit code come through, the sandbox is isolated (its own pid
// namespace, a sandbox uid), and nothing of it is left once the process
// exits. `run` starts one sandbox and so, unlike serve, does not copy its
// own binary into memory first: libcontainer protects the binary per
// sandbox, and the init runs from agentbox-init next to the agent.
func TestRunOneShot(t *testing.T) {
	testutil.RequireRoot(t)
	bin, agent := binaries(t)
	dataDir := testutil.ShortTempDir(t)
	cmd := execCommand(bin, "run", "--data-dir", dataDir, "--",
		"sh", "-c", `echo ready; head -c 1 >/dev/null; echo "pid=$$ uid=$(id -u)"; echo oops >&2; exit 7`)
	cmd.Env = append(cmd.Env, "AGENT_PATH="+agent)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Bounded: a hung run is killed, which ends the reads below.
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	stdout := bufio.NewReader(stdoutPipe)
	if line, err := stdout.ReadString('\n'); line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("first line %q (%v), want ready; stderr %q", line, err, stderr.String())
	}
	// The command runs: `run` did not re-execute itself from an in-memory
	// copy (that is for serve, which starts many sandboxes).
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); err != nil || strings.HasPrefix(exe, "/memfd:") {
		t.Errorf("agentbox run runs from %q (%v), want its binary on disk", exe, err)
	}
	stdin.Write([]byte("x"))
	stdin.Close()
	rest, _ := io.ReadAll(stdout)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("agentbox run: %v, want exit code 7; stdout %q, stderr %q", err, rest, stderr.String())
	}
	out := strings.TrimSpace(string(rest))
	// The agent is pid 1 of the sandbox; the shell a low pid of its own
	// namespace, running as the sandbox's unprivileged user.
	if !strings.HasPrefix(out, "pid=") || strings.HasPrefix(out, "pid=1 ") || !strings.HasSuffix(out, " uid=1000") {
		t.Errorf("stdout %q, want the command's own output from a sandbox (pid != 1, uid 1000)", out)
	}
	if pid := strings.TrimSuffix(strings.TrimPrefix(out, "pid="), " uid=1000"); len(pid) > 3 {
		t.Errorf("the command's pid %s is not from a fresh pid namespace", pid)
	}
	if !strings.Contains(stderr.String(), "oops") {
		t.Errorf("stderr %q, want the command's stderr", stderr.String())
	}
	assertOneShotGone(t, dataDir)
}

// assertOneShotGone fails t if a one-shot run under dataDir left a
// sandbox directory, a disk or a mount behind.
func assertOneShotGone(t *testing.T, dataDir string) {
	t.Helper()
	oneshot := filepath.Join(dataDir, "oneshot")
	for _, sub := range []string{"state/sb", "disks"} {
		entries, _ := os.ReadDir(filepath.Join(oneshot, sub))
		for _, e := range entries {
			t.Errorf("%s left behind: %s", sub, e.Name())
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, oneshot+"/") {
			t.Errorf("mount left behind: %s", line)
		}
	}
}

// TestRunOneShotReaderGone: a reader that closes the output early
// (`agentbox run ... | head -1`) ends the run with 141, the shell's code
// for a writer killed by SIGPIPE, and the sandbox is destroyed as usual
// (SIGPIPE used to kill the run before its deferred destroy).
func TestRunOneShotReaderGone(t *testing.T) {
	testutil.RequireRoot(t)
	bin, agent := binaries(t)
	dataDir := testutil.ShortTempDir(t)
	cmd := execCommand(bin, "run", "--data-dir", dataDir, "--no-stdin", "--", "sh", "-c", `while :; do echo more; done`)
	cmd.Env = append(cmd.Env, "AGENT_PATH="+agent)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	if line, err := bufio.NewReader(r).ReadString('\n'); line != "more\n" {
		t.Fatalf("first line %q (%v); stderr %q", line, err, stderr.String())
	}
	r.Close()
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 141 {
		t.Fatalf("agentbox run whose reader went away: %v, want exit code 141; stderr %q", err, stderr.String())
	}
	assertOneShotGone(t, dataDir)
}
