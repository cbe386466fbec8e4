// Command agentbox-init is the first process of every native sandbox: runc's
// libcontainer init (mounts, pivot_root, capabilities, exec of the agent),
// in a small binary of its own.
//
// The daemon starts each sandbox the way libcontainer does — by re-executing
// itself as "<daemon> init", whose C constructor (runc's nsenter) creates and
// joins the namespaces — and then, once in the sandbox's namespaces and before
// the daemon's Go runtime and its hundreds of package initializers start,
// switches to this binary (internal/backend/native/fastinit). The daemon hands
// it over as a sealed in-memory copy made once at start, so a sandbox cannot
// reach or rewrite the file on the host (CVE-2019-5736), as with the daemon's
// own sealed copy. Not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "init" || os.Getenv("_LIBCONTAINER_INITPIPE") == "" {
		fmt.Fprintln(os.Stderr, "agentbox-init: the agentbox daemon starts this for each sandbox; it is not run by hand")
		os.Exit(2)
	}
	// runc's nsenter made the process non-dumpable while it joins the
	// sandbox's namespaces; execve made it dumpable again. Restore that
	// before anything else, so no process of the sandbox's user namespace
	// can ptrace or read the init while it holds host descriptors.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "agentbox-init: set non-dumpable:", err)
		os.Exit(255)
	}
	libcontainer.Init() // never returns
}
