//go:build linux && cgo

// Package usernsholder starts the process that holds a new user namespace
// open for a sandbox being created, without copying the daemon.
//
// The holder is a child in a new user namespace, stopped (ptrace) right
// after its execve so that it never runs an instruction of the program.
// Go's os.StartProcess cannot start it with vfork semantics: with
// CLONE_NEWUSER it forks, which copies the daemon's page tables and
// descriptor table, and then the execve throws the copy away, a cost
// that grows with the daemon (3-4 ms more with 1,000 sandboxes). Start
// clones with CLONE_VM|CLONE_VFORK instead: the child runs on a stack of
// its own in the daemon's memory, with the calling thread suspended, until
// its execve.
package usernsholder

/*
#cgo CFLAGS: -Wall
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

struct holder_args {
	const char *exe;
	char *const *argv;
	char *const *envp;
	volatile int err;
};

// holder_child runs in the daemon's memory until its execve: raw system
// calls only, nothing that allocates or takes a lock.
static int holder_child(void *p) {
	struct holder_args *a = p;
	struct sigaction dfl = {0};
	dfl.sa_handler = SIG_DFL;
	// The handlers are the daemon's (Go's); a signal before the execve must
	// not run them on this stack. The execve resets them anyway.
	for (int sig = 1; sig < _NSIG; sig++) {
		if (sig != SIGKILL && sig != SIGSTOP) {
			syscall(SYS_rt_sigaction, sig, &dfl, NULL, _NSIG / 8);
		}
	}
	sigset_t none;
	sigemptyset(&none);
	// Unblocked, so the exec's SIGTRAP stops the child (a blocked one
	// would stay pending and let the program run).
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, _NSIG / 8);
	if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 ||
	    syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0) != 0) {
		a->err = errno;
		syscall(SYS_exit, 127);
	}
	syscall(SYS_execve, a->exe, a->argv, a->envp);
	a->err = errno;
	syscall(SYS_exit, 127);
	return 127;
}

// start_holder returns the child's pid, or -errno.
static int start_holder(const char *exe) {
	char *argv[] = {"agentbox-userns", NULL};
	char *envp[] = {NULL};
	struct holder_args a = {exe, argv, envp, 0};
	const size_t size = 64 * 1024;
	void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		return -errno;
	}
	// Blocked in the caller from the clone on, so no signal reaches the
	// child before it has set its handlers back to the defaults.
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int pid = clone(holder_child, (char *)stack + size, CLONE_VM | CLONE_VFORK | CLONE_NEWUSER | SIGCHLD, &a);
	int err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	// The child has executed (or exited): it no longer uses the stack.
	munmap(stack, size);
	if (pid < 0) {
		return -err;
	}
	if (a.err != 0) {
		waitpid(pid, NULL, __WALL);
		return -a.err;
	}
	return pid;
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// Start starts exe as a child in a new user namespace owned by the calling
// thread's effective ids, stopped at its execve, and returns its pid. The
// caller is its tracer and reaps it; it gets SIGKILL when the calling
// thread ends. Call it on a locked OS thread.
func Start(exe string) (int, error) {
	cexe := C.CString(exe)
	defer C.free(unsafe.Pointer(cexe))
	pid := int(C.start_holder(cexe))
	if pid < 0 {
		return 0, fmt.Errorf("clone user namespace holder: %w", syscall.Errno(-pid))
	}
	return pid, nil
}
