package agent

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// rlimitNames are the limits a backend may hand the agent (--rlimits).
var rlimitNames = map[string]int{
	"nofile": syscall.RLIMIT_NOFILE,
	"core":   syscall.RLIMIT_CORE,
}

// ApplyRlimits sets the agent's own resource limits from spec, a comma
// list of name=soft:hard (e.g. "nofile=1024:4096,core=0:0"), before it
// starts anything: every process of the sandbox descends from the agent
// and inherits them. Lowering a limit needs no privilege, so this works in
// any sandbox; raising one past the current hard limit fails.
//
// syscall.Setrlimit (not x/sys/unix) on purpose: for RLIMIT_NOFILE it also
// drops the soft limit the Go runtime saved at start to restore in every
// child, so children get the limit set here and not the daemon's.
func ApplyRlimits(spec string) error {
	if spec == "" {
		return nil
	}
	// Parse all before setting any: a bad spec changes nothing.
	type limit struct {
		name     string
		resource int
		rlimit   syscall.Rlimit
	}
	var limits []limit
	for _, item := range strings.Split(spec, ",") {
		name, values, ok := strings.Cut(item, "=")
		res, known := rlimitNames[name]
		softS, hardS, ok2 := strings.Cut(values, ":")
		if !ok || !known || !ok2 {
			return fmt.Errorf("rlimit %q: want name=soft:hard with name one of nofile, core", item)
		}
		soft, err1 := strconv.ParseUint(softS, 10, 64)
		hard, err2 := strconv.ParseUint(hardS, 10, 64)
		if err1 != nil || err2 != nil || soft > hard {
			return fmt.Errorf("rlimit %q: soft and hard must be numbers, soft <= hard", item)
		}
		limits = append(limits, limit{name, res, syscall.Rlimit{Cur: soft, Max: hard}})
	}
	for _, l := range limits {
		if err := syscall.Setrlimit(l.resource, &l.rlimit); err != nil {
			return fmt.Errorf("set rlimit %s to %d:%d: %w", l.name, l.rlimit.Cur, l.rlimit.Max, err)
		}
	}
	return nil
}
