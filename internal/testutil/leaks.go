package testutil

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// VerifyMain runs a package's tests, then Cleanup, and fails the run when
// a goroutine outlives them (go.uber.org/goleak): a test that starts a
// server, a watcher or a stream must also end it. Call it as the whole
// TestMain of a package whose code starts goroutines. extra adds
// goroutines the package knows to be process-wide (each with its reason).
func VerifyMain(m *testing.M, extra ...goleak.Option) {
	VerifyMainAfter(m, nil, extra...)
}

// VerifyMainAfter is VerifyMain for a package whose tests share something
// for the whole run (a server the fuzz targets reuse): teardown, when not
// nil, ends it after the tests and before the goroutines are counted.
func VerifyMainAfter(m *testing.M, teardown func(), extra ...goleak.Option) {
	code := m.Run()
	if teardown != nil {
		teardown()
	}
	if code == 0 {
		if err := goleak.Find(LeakOptions(extra...)...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on a successful test run: %v\n", err)
			code = 1
		}
	}
	Cleanup()
	os.Exit(code)
}

// LeakOptions are goleak's options for this module: the goroutines that
// live as long as the process by design, plus extra. There are none so
// far: the module's own long-lived goroutines all belong to something a
// test can close (servers, managers, pools, watchers).
func LeakOptions(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{}, extra...)
}
