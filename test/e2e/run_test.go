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
	"strconv"
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
	rest, stderr := runInteractive(t, cmd, 7, func() {
		// The command runs: `run` did not re-execute itself from an
		// in-memory copy (that is for serve, which starts many sandboxes).
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); err != nil || strings.HasPrefix(exe, "/memfd:") {
			t.Errorf("agentbox run runs from %q (%v), want its binary on disk", exe, err)
		}
	})
	out := strings.TrimSpace(rest)
	// The agent is pid 1 of the sandbox; the shell a low pid of its own
	// namespace, running as the sandbox's unprivileged user.
	if !strings.HasPrefix(out, "pid=") || strings.HasPrefix(out, "pid=1 ") || !strings.HasSuffix(out, " uid=1000") {
		t.Errorf("stdout %q, want the command's own output from a sandbox (pid != 1, uid 1000)", out)
	}
	if pid := strings.TrimSuffix(strings.TrimPrefix(out, "pid="), " uid=1000"); len(pid) > 3 {
		t.Errorf("the command's pid %s is not from a fresh pid namespace", pid)
	}
	if !strings.Contains(stderr, "oops") {
		t.Errorf("stderr %q, want the command's stderr", stderr)
	}
	assertOneShotGone(t, dataDir)
}

// runInteractive runs cmd, an `agentbox run` of a command that prints
// "ready", then reads one byte of input before it goes on: it waits for
// that line, calls meanwhile, only then sends the byte (so input must be
// streamed to the command, not read up front), and returns the rest of the
// output and stderr, failing t unless cmd exits with code.
func runInteractive(t *testing.T, cmd *exec.Cmd, code int, meanwhile func()) (rest, stderr string) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
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
		t.Fatalf("first line %q (%v), want ready; stderr %q", line, err, errBuf.String())
	}
	meanwhile()
	stdin.Write([]byte("x"))
	stdin.Close()
	out, _ := io.ReadAll(stdout)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != code {
		t.Fatalf("agentbox run: %v, want exit code %d; stdout %q, stderr %q", err, code, out, errBuf.String())
	}
	return string(out), errBuf.String()
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

// TestRunOneShotReapsAbandoned: a run killed outright (SIGKILL: no
// deferred destroy runs) leaves its sandbox running; the next run on the
// same data directory removes it, and never a live run's sandbox.
func TestRunOneShotReapsAbandoned(t *testing.T) {
	testutil.RequireRoot(t)
	bin, agent := binaries(t)
	dataDir := testutil.ShortTempDir(t)
	run := func(args ...string) *exec.Cmd {
		cmd := execCommand(bin, append([]string{"run", "--data-dir", dataDir, "--no-stdin", "--"}, args...)...)
		cmd.Env = append(cmd.Env, "AGENT_PATH="+agent)
		return cmd
	}
	// Whatever happens below, a last run removes what is left.
	t.Cleanup(func() { run("true").Run() })
	start := func() (*exec.Cmd, *bufio.Reader) {
		t.Helper()
		cmd := run("sh", "-c", "echo ready; exec sleep 600")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
		t.Cleanup(func() { timer.Stop(); cmd.Process.Kill(); cmd.Wait() })
		r := bufio.NewReader(out)
		if line, err := r.ReadString('\n'); line != "ready\n" {
			t.Fatalf("first line %q (%v)", line, err)
		}
		return cmd, r
	}
	sandboxes := func() []string {
		entries, _ := os.ReadDir(filepath.Join(dataDir, "oneshot", "state", "sb"))
		var ids []string
		for _, e := range entries {
			ids = append(ids, e.Name())
		}
		return ids
	}
	killed, _ := start()
	abandoned := sandboxes()
	if len(abandoned) != 1 {
		t.Fatalf("sandboxes of the first run: %v", abandoned)
	}
	initPids := pidsInCgroupsOf(t, abandoned[0])
	if len(initPids) == 0 {
		t.Fatalf("no process of sandbox %s found", abandoned[0])
	}
	killed.Process.Kill()
	killed.Wait()
	if got := sandboxes(); len(got) != 1 {
		t.Fatalf("after SIGKILL of its run: %v, want the sandbox still there", got)
	}
	// A live run's sandbox beside it must survive the reaping.
	live, liveOut := start()
	if err := run("true").Run(); err != nil {
		t.Fatalf("the run after: %v", err)
	}
	got := sandboxes()
	if len(got) != 1 || got[0] == abandoned[0] {
		t.Fatalf("after the next run: %v, want only the live run's (abandoned %s)", got, abandoned[0])
	}
	// Dead, or a zombie: the init's parent died with the killed run, so
	// the host's init reaps it, in its own time.
	for _, pid := range initPids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if i := bytes.LastIndexByte(stat, ')'); err == nil && i > 0 && len(stat) > i+2 && stat[i+2] != 'Z' {
			t.Errorf("process %d of the abandoned sandbox survived: %s", pid, stat)
		}
	}
	live.Process.Signal(os.Interrupt)
	io.Copy(io.Discard, liveOut)
	live.Wait()
	assertOneShotGone(t, dataDir)
}

// pidsInCgroupsOf returns the host pids whose cgroup path names sandbox id.
func pidsInCgroupsOf(t *testing.T, id string) []int {
	t.Helper()
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err == nil && strings.Contains(string(data), "/"+id+"\n") {
			pids = append(pids, pid)
		}
	}
	return pids
}
