package native

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Compiling Docker's profile with libseccomp costs ~20 ms of CPU. libcontainer
// would do it in every sandbox's init; instead the backend compiles each
// profile once and the agent installs the finished BPF program as its first
// act (see internal/seccompload), before any sandbox code can run. The agent
// refuses to start if that fails, so a sandbox never runs unfiltered.

// compileSeccomp turns the profile for capabilities into a BPF program for
// this machine's native architecture and its compat ones.
func compileSeccomp(capabilities []string) ([]byte, error) {
	prof, err := seccompProfile(capabilities)
	if err != nil {
		return nil, err
	}
	return compileSeccompProfile(prof)
}

// compileSeccompProfile compiles prof with libseccomp.
func compileSeccompProfile(prof *specs.LinuxSeccomp) ([]byte, error) {
	cfg, err := specconv.SetupSeccomp(prof)
	if err != nil {
		return nil, fmt.Errorf("convert seccomp profile: %w", err)
	}
	defAct, err := scmpAction(cfg.DefaultAction, cfg.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	filter, err := libseccomp.NewFilter(defAct)
	if err != nil {
		return nil, fmt.Errorf("new seccomp filter: %w", err)
	}
	defer filter.Release()
	for _, arch := range cfg.Architectures {
		a, err := libseccomp.GetArchFromString(arch)
		if err != nil {
			return nil, fmt.Errorf("seccomp arch %q: %w", arch, err)
		}
		if err := filter.AddArch(a); err != nil {
			return nil, fmt.Errorf("seccomp arch %q: %w", arch, err)
		}
	}
	// The agent's process has no_new_privs already (libcontainer sets it);
	// the exported program must not try to set it again.
	if err := filter.SetNoNewPrivsBit(false); err != nil {
		return nil, err
	}
	_ = filter.SetOptimize(2) // binary tree: long rule lists evaluate faster
	for _, call := range cfg.Syscalls {
		if err := addSeccompRule(filter, call, defAct); err != nil {
			return nil, err
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	done := make(chan []byte, 1)
	go func() {
		data, _ := io.ReadAll(r)
		done <- data
	}()
	exportErr := filter.ExportBPF(w)
	w.Close()
	data := <-done
	if exportErr != nil {
		return nil, fmt.Errorf("export seccomp program: %w", exportErr)
	}
	if len(data) == 0 {
		return nil, errors.New("export seccomp program: empty")
	}
	return data, nil
}

func scmpAction(act configs.Action, errno *uint) (libseccomp.ScmpAction, error) {
	switch act {
	case configs.Allow:
		return libseccomp.ActAllow, nil
	case configs.Errno:
		code := uint(unix.EPERM)
		if errno != nil {
			code = *errno
		}
		return libseccomp.ActErrno.SetReturnCode(int16(code)), nil
	case configs.KillProcess:
		return libseccomp.ActKillProcess, nil
	case configs.Kill, configs.KillThread:
		return libseccomp.ActKillThread, nil
	case configs.Log:
		return libseccomp.ActLog, nil
	}
	return libseccomp.ActInvalid, fmt.Errorf("unsupported seccomp action %v", act)
}

var scmpOps = map[configs.Operator]libseccomp.ScmpCompareOp{
	configs.EqualTo:              libseccomp.CompareEqual,
	configs.NotEqualTo:           libseccomp.CompareNotEqual,
	configs.GreaterThan:          libseccomp.CompareGreater,
	configs.GreaterThanOrEqualTo: libseccomp.CompareGreaterEqual,
	configs.LessThan:             libseccomp.CompareLess,
	configs.LessThanOrEqualTo:    libseccomp.CompareLessOrEqual,
	configs.MaskEqualTo:          libseccomp.CompareMaskedEqual,
}

func addSeccompRule(filter *libseccomp.ScmpFilter, call *configs.Syscall, defAct libseccomp.ScmpAction) error {
	act, err := scmpAction(call.Action, call.ErrnoRet)
	if err != nil {
		return fmt.Errorf("syscall %s: %w", call.Name, err)
	}
	if act == defAct {
		return nil // the default does it already; libseccomp rejects the duplicate
	}
	num, err := libseccomp.GetSyscallFromName(call.Name)
	if err != nil {
		return nil // not a syscall on this architecture
	}
	if len(call.Args) == 0 {
		if err := filter.AddRule(num, act); err != nil {
			return fmt.Errorf("seccomp rule %s: %w", call.Name, err)
		}
		return nil
	}
	conds := make([]libseccomp.ScmpCondition, 0, len(call.Args))
	perArg := map[uint]int{}
	for _, a := range call.Args {
		op, ok := scmpOps[a.Op]
		if !ok {
			return fmt.Errorf("seccomp rule %s: unsupported operator %v", call.Name, a.Op)
		}
		c, err := libseccomp.MakeCondition(a.Index, op, a.Value, a.ValueTwo)
		if err != nil {
			return fmt.Errorf("seccomp rule %s: %w", call.Name, err)
		}
		perArg[a.Index]++
		conds = append(conds, c)
	}
	// Several conditions on one argument mean "any of them" in Docker's
	// profiles: one rule each. Otherwise all conditions form one rule.
	for _, n := range perArg {
		if n > 1 {
			for _, c := range conds {
				if err := filter.AddRuleConditional(num, act, []libseccomp.ScmpCondition{c}); err != nil {
					return fmt.Errorf("seccomp rule %s: %w", call.Name, err)
				}
			}
			return nil
		}
	}
	if err := filter.AddRuleConditional(num, act, conds); err != nil {
		return fmt.Errorf("seccomp rule %s: %w", call.Name, err)
	}
	return nil
}
