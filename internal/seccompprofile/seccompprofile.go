// Package seccompprofile is agentbox's seccomp profile, shared by every
// backend: Docker's default profile with the kernel attack surface no agent
// needs refused outright. The native backend compiles it to BPF itself; the
// Docker backend hands the engine its JSON (see Docker).
package seccompprofile

import (
	"encoding/json"
	"fmt"
	"slices"

	profiles "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// DeniedSyscalls are refused with EPERM whatever the base profile or the
// sandbox's capabilities allow: kernel attack surface no agent needs
// (namespaces, the mount API, tracing, BPF, io_uring, keyrings, modules,
// clocks, swap, reboot).
var DeniedSyscalls = []string{
	"unshare", "setns",
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module", "create_module",
	"open_by_handle_at", "name_to_handle_at",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
	"iopl", "ioperm", "syslog",
	"settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64",
	"lookup_dcookie", "fanotify_init", "vhangup", "nfsservctl",
}

// SelfOnlyRlimits: prlimit64 may read any process's resource limits but
// set only the caller's own (pid 0, what setrlimit in glibc, musl, Go and
// util-linux's `prlimit CMD` pass), never another process's: sandbox code
// runs as its agent's uid, and would otherwise lower the limits the agent
// and every command it starts run with, hard ones included, which the
// agent cannot raise again. Setting another process's limits is
// `prlimit --pid`, which ordinary programs do not need.
var selfOnlyRlimits = []specs.LinuxSyscall{
	{Names: []string{"prlimit64"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0, Op: specs.OpEqualTo}}},
	{Names: []string{"prlimit64"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 2, Value: 0, Op: specs.OpEqualTo}}},
}

// OCI returns Docker's default profile, evaluated for the given
// capability set, with DeniedSyscalls removed from every allow rule and
// refused explicitly, clone3 failing with ENOSYS so glibc falls back to
// clone (where the namespace flags are filtered) instead of failing thread
// creation, and prlimit64 allowed only as selfOnlyRlimits says (the
// profile's default action, EPERM, refuses the rest).
func OCI(capabilities []string) (*specs.LinuxSeccomp, error) {
	rs := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: capabilities}}}
	prof, err := profiles.GetDefaultProfile(rs)
	if err != nil {
		return nil, fmt.Errorf("load default seccomp profile: %w", err)
	}
	denied := make(map[string]bool, len(DeniedSyscalls)+1)
	for _, name := range DeniedSyscalls {
		denied[name] = true
	}
	denied["clone3"] = true

	var rules []specs.LinuxSyscall
	for _, rule := range prof.Syscalls {
		if rule.Action == specs.ActAllow || rule.Action == specs.ActLog {
			rule.Names = slices.DeleteFunc(slices.Clone(rule.Names), func(n string) bool { return denied[n] })
			if len(rule.Names) == 0 {
				continue
			}
		}
		rules = append(rules, rule)
	}
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	explicit := []specs.LinuxSyscall{
		{Names: slices.Clone(DeniedSyscalls), Action: specs.ActErrno, ErrnoRet: &eperm},
		{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
	}
	// Explicit refusals go first; libseccomp resolves overlapping rules by
	// action precedence anyway (errno beats allow), but readers look at order.
	rules = withoutNames(rules, "clone3", "prlimit64")
	prof.Syscalls = append(explicit, append(rules, selfOnlyRlimits...)...)
	if prof.DefaultAction != specs.ActErrno || prof.DefaultErrnoRet == nil || *prof.DefaultErrnoRet != eperm {
		// What refuses prlimit64 on another process.
		return nil, fmt.Errorf("seccomp: the default profile's default action is %s, not EPERM", prof.DefaultAction)
	}
	return prof, nil
}

// withoutNames drops names from every rule (used to keep a single clone3 rule).
func withoutNames(rules []specs.LinuxSyscall, names ...string) []specs.LinuxSyscall {
	out := rules[:0]
	for _, r := range rules {
		r.Names = slices.DeleteFunc(r.Names, func(n string) bool { return slices.Contains(names, n) })
		if len(r.Names) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// Docker returns the profile for the given capability set as the JSON a
// Docker engine takes in HostConfig.SecurityOpt ("seccomp=<json>"). The
// engine reads an OCI seccomp object (defaultAction, architectures,
// syscalls with names, action, errnoRet and args) as a profile whose
// rules carry no capability conditions: it is already evaluated for caps.
func Docker(capabilities []string) ([]byte, error) {
	prof, err := OCI(capabilities)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(prof)
	if err != nil {
		return nil, fmt.Errorf("encode seccomp profile: %w", err)
	}
	return data, nil
}
