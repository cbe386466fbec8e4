package native

import (
	// Hands a sandbox's init over to agentbox-init (see the package).
	_ "github.com/agentbox/agentbox/internal/backend/native/fastinit"
	"os"
	"runtime"

	// Registers the cgroup device-rules manager; without it libcontainer
	// refuses to apply the default-deny device policy.
	_ "github.com/opencontainers/cgroups/devices"
	"github.com/opencontainers/runc/libcontainer"
	// nsenter's C constructor runs before the Go runtime in "init" re-execs
	// and joins/creates the namespaces; it must be linked in.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// libcontainer starts every sandbox by re-executing the current binary as
// "<binary> init". Handling that in a package init function (rather than in
// each main) makes every binary that links this package — the daemon, the
// CLI, test binaries — able to start sandboxes without extra wiring.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		if pipe := os.Getenv("_AGENTBOX_INITPIPE"); pipe != "" {
			// fastinit set the sandbox up but could not switch to
			// agentbox-init, and hid the pipe from nsenter's constructor.
			_ = os.Setenv("_LIBCONTAINER_INITPIPE", pipe)
			_ = os.Unsetenv("_AGENTBOX_INITPIPE")
		}
		libcontainer.Init() // never returns
	}
	// Keep the main thread to the main goroutine. libcontainer joins each
	// new container's mount namespace from a locked goroutine and relies on
	// Go ending that thread when the goroutine returns; Go cannot end the
	// main thread, so if the goroutine ran there the whole process would
	// stay in that sandbox's mount namespace, holding its disk mounted
	// (Start then found the image busy) long after the sandbox stopped.
	runtime.LockOSThread()
}
