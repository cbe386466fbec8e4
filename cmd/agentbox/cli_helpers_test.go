package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client/fakeserver"
)

// cliResult is what one in-process run of the CLI produced.
type cliResult struct {
	stdout, stderr string
	code           int    // the exit code main would use
	msg            string // what main would print after "agentbox:"
}

// runCLI runs the client commands in-process against the fake server at
// url, as main does (same flags, same commands), with stdin and captured
// output; it is bounded to 20 s.
func runCLI(t *testing.T, url, stdin string, args ...string) cliResult {
	t.Helper()
	root := &cobra.Command{Use: "agentbox", SilenceUsage: true, SilenceErrors: true}
	addClientFlags(root)
	addClientCommands(root)
	root.SetIn(strings.NewReader(stdin))
	return execute(root, append([]string{"--url", url}, args...))
}

// execute runs root with args as main does, bounded to 20 s, and returns
// its output and the exit code and message main would give.
func execute(root *cobra.Command, args []string) cliResult {
	var stdout, stderr strings.Builder
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exitError
	switch {
	case errors.As(err, &exit):
		res.code, res.msg = exit.code, exit.msg
	case err != nil:
		res.code, res.msg = 1, err.Error()
	}
	return res
}

// newFake starts a fake server with one running sandbox.
func newFake(t *testing.T) (*fakeserver.Server, string) {
	fs := fakeserver.New(t)
	id := fs.AddSandbox("host", map[string]string{"owner": "test"}, time.Minute, time.Hour)
	return fs, id
}

// safeBuffer is a strings.Builder safe for a writer and a reader goroutine.
type safeBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runAll runs the CLI with the commands of main these tests use (client
// commands, run, mcp, doctor, version) and args as given (no --url added),
// as main does; it is bounded to 20 s.
func runAll(t *testing.T, args ...string) cliResult {
	t.Helper()
	root := &cobra.Command{Use: "agentbox", SilenceUsage: true, SilenceErrors: true}
	addClientFlags(root)
	addClientCommands(root)
	root.AddCommand(newRunCmd(), newMCPCmd(), newDoctorCmd(), newVersionCmd())
	return execute(root, args)
}

// refusedURL returns the URL of a loopback port nothing listens on.
func refusedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	return url
}
