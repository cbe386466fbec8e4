// Command seccompgen writes deploy/docker/seccomp.json: Docker's default
// seccomp profile (github.com/moby/profiles/seccomp, the version agentbox
// pins) plus the few calls the agentbox daemon needs that it refuses
// whatever the capabilities. make image regenerates it; test/packaging
// checks that the committed file is current.
//
//	go run ./tools/seccompgen > deploy/docker/seccomp.json
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// extra are the additions, each with the reason.
var extra = []struct {
	names  []string
	reason string
}{
	{[]string{"keyctl", "add_key", "request_key"},
		"libcontainer gives each sandbox a session keyring of its own (KEYCTL_JOIN_SESSION_KEYRING) so that sandboxes never share the daemon's; agentbox's own filter refuses these calls to sandbox code"},
	{[]string{"pivot_root"},
		"each sandbox's init moves into its root filesystem with pivot_root (runc's jail); agentbox's own filter refuses it to sandbox code"},
}

func main() {
	p := seccomp.DefaultProfile()
	for _, e := range extra {
		p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
			LinuxSyscall: specs.LinuxSyscall{Names: e.names, Action: specs.ActAllow},
			Comment:      "agentbox: " + e.reason,
		})
	}
	out, err := json.MarshalIndent(p, "", "\t")
	if err != nil {
		fmt.Fprintln(os.Stderr, "seccompgen:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(append(out, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "seccompgen:", err)
		os.Exit(1)
	}
}
