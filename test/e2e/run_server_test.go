package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestRunViaServer: `agentbox run --url` makes its sandbox through a
// server, for any user with an API key (here: nobody, no root), and keeps
// the standalone run's contract: input streamed as the command reads it,
// output byte for byte, the command's exit code, 124 for --timeout, and no
// sandbox left once it exits. A run killed outright leaves a sandbox that
// the server destroys within the run's lease.
func TestRunViaServer(t *testing.T) {
	testutil.RequireRoot(t)
	bin, _ := binaries(t)
	d := startDaemon(t, "API_KEYS=k-alice:alice")
	// A copy nobody can execute, to run the client without root.
	dir := testutil.ShortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	cli := filepath.Join(dir, "agentbox")
	if err := os.WriteFile(cli, data, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) *exec.Cmd {
		cmd := execCommand(cli, append([]string{"run", "--url", d.url, "--api-key", "k-alice"}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Dir = "/"
		return cmd
	}
	// Bounded: a hung run is killed, which ends its reads.
	bound := func(cmd *exec.Cmd) func() bool {
		timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
		return timer.Stop
	}

	t.Run("interactive", func(t *testing.T) {
		cmd := run("--", "sh", "-c", `echo ready; head -c 1 >/dev/null; echo "uid=$(id -u)"; echo oops >&2; exit 7`)
		rest, stderr := runInteractive(t, cmd, 7, func() {})
		if rest != "uid=1000\n" || !strings.Contains(stderr, "oops") {
			t.Fatalf("stdout %q, stderr %q", rest, stderr)
		}
	})

	t.Run("binary", func(t *testing.T) {
		in := make([]byte, 256<<10)
		rand.Read(in)
		cmd := run("--", "cat")
		cmd.Stdin = bytes.NewReader(in)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer bound(cmd)()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: %s", err, stderr.String())
		}
		if !bytes.Equal(out.Bytes(), in) {
			t.Fatalf("%d bytes in, %d out, not the same", len(in), out.Len())
		}
	})

	t.Run("timeout", func(t *testing.T) {
		cmd := run("--no-stdin", "--timeout", "1s", "--", "sleep", "30")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 124 {
			t.Fatalf("run: %v, want exit code 124; stderr %q", err, stderr.String())
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, args := range [][]string{{"--root", "--", "true"}, {"--template", "dir:/etc", "--", "true"}} {
			var stderr bytes.Buffer
			cmd := run(args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 125 || !strings.Contains(stderr.String(), "without a server") {
				t.Errorf("%v: %v, stderr %q; want 125 and why", args, err, stderr.String())
			}
		}
	})

	// Every run above deleted its sandbox.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sdk := d.sdk(t, "k-alice")
	if page, err := sdk.List(ctx, client.ListOptions{}); err != nil || len(page.Sandboxes) != 0 {
		t.Fatalf("after the runs: %v sandboxes (%v), want none", page, err)
	}

	t.Run("killed", func(t *testing.T) {
		cmd := run("--", "sh", "-c", "echo ready; exec sleep 600")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer bound(cmd)()
		if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
			t.Fatalf("first line %q (%v)", line, err)
		}
		cmd.Process.Kill()
		cmd.Wait()
		page, err := sdk.List(ctx, client.ListOptions{})
		if err != nil || len(page.Sandboxes) != 1 {
			t.Fatalf("after a killed run: %v (%v), want its sandbox", page, err)
		}
		sb := page.Sandboxes[0]
		if left := time.Until(sb.EndAt); left <= 0 || left > 2*time.Minute+5*time.Second {
			t.Fatalf("the killed run's sandbox ends in %v, want within its 2 min lease", left)
		}
		if err := sdk.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	})
}
