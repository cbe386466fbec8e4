package agent

import (
	"log/slog"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

const (
	sigTERM = unix.SIGTERM
	sigKILL = unix.SIGKILL
)

// straySignals are the catchable signals whose Go default would end the
// agent: HUP, INT and TERM make the runtime exit; QUIT, ILL, TRAP, ABRT,
// STKFLT and SYS make it dump and exit; BUS, FPE and SEGV sent with kill(2)
// crash it. The rest are harmless by default but listed so that none of
// them ever changes the agent's behaviour.
var straySignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT,
	unix.SIGBUS, unix.SIGFPE, unix.SIGUSR1, unix.SIGSEGV, unix.SIGUSR2, unix.SIGPIPE,
	unix.SIGALRM, unix.SIGTERM, unix.SIGSTKFLT, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM,
	unix.SIGIO, unix.SIGPWR, unix.SIGSYS,
}

// IgnoreStraySignals makes the agent immune to every signal a process can
// send it except those in keep (which the caller handles itself).
//
// As PID 1 of a pid namespace the agent receives from the sandbox's own
// processes only the signals it has a handler for, and the Go runtime
// installs one for nearly all of them, so a plain `kill -TERM 1` in a
// sandbox used to end the agent. The host stops a sandbox with SIGKILL,
// which the kernel always delivers from the parent namespace, so as PID 1
// the agent needs no signal at all.
//
// The signals are caught and dropped rather than ignored: SIG_IGN would be
// inherited through execve by every process the agent starts, while caught
// signals are reset to their defaults there.
func IgnoreStraySignals(log *slog.Logger, keep ...os.Signal) {
	var drop []os.Signal
	for _, s := range straySignals {
		if !containsSignal(keep, s) {
			drop = append(drop, s)
		}
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, drop...)
	go func() {
		logged := 0
		for s := range ch {
			// Bounded: a loop of kill(1) must not flood the agent's log.
			if logged++; logged <= 100 {
				log.Info("ignored a signal sent to the agent", "signal", s.String())
			}
		}
	}()
}

func containsSignal(list []os.Signal, s os.Signal) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
