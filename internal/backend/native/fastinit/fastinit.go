//go:build linux && cgo

// Package fastinit switches a sandbox's init from the daemon binary to the
// small agentbox-init binary before the daemon's Go runtime starts.
//
// libcontainer starts a sandbox by executing the daemon binary again as
// "<daemon> init". runc's nsenter C constructor creates and joins the
// sandbox's namespaces in that process and then returns to the Go runtime,
// which would start the daemon's runtime and run every package initializer
// of a binary that links the Kubernetes client, gRPC, OpenTelemetry and the
// rest (≈ 11–13 ms of CPU per sandbox) before reaching libcontainer's Go init.
// The constructor here takes over in that process: it runs nsenter's setup
// itself (or finds it done), and once in the sandbox's namespaces, when the
// daemon passed the sealed in-memory agentbox-init (see native.initBinary),
// executes that instead, which runs the very same libcontainer init from a
// 4 MB binary with 48 packages. Without it, the daemon binary's own init
// carries on as before.
package fastinit

/*
#cgo CFLAGS: -Wall
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif
#ifndef F_SEAL_WRITE
#define F_SEAL_WRITE 0x0008
#endif
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

// The memfd's link in /proc (native.initBinaryName, sealed by exeseal).
#define AGENTBOX_INIT_LINK "/memfd:runc_cloned:agentbox-init (deleted)"
#define STAGE2_NAME "runc:[2:INIT]"

// runc's nsenter (libcontainer/nsenter/nsexec.c).
extern void nsexec(void);

// initFd returns the descriptor of the sealed agentbox-init the daemon
// passed, or -1. libcontainer places the process's extra files, the binary
// last, right before its init pipe; a console socket would sit in between.
static int initFd(void)
{
	const char *pipe = getenv("_LIBCONTAINER_INITPIPE");
	const char *type = getenv("_LIBCONTAINER_INITTYPE");
	if (pipe == NULL || type == NULL || strcmp(type, "standard") != 0 || getenv("_LIBCONTAINER_CONSOLE") != NULL)
		return -1;
	int fd = atoi(pipe) - 1;
	if (fd < 3)
		return -1;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_WRITE))
		return -1;
	char path[64], link[128];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return -1;
	link[n] = '\0';
	if (strcmp(link, AGENTBOX_INIT_LINK) != 0)
		return -1;
	return fd;
}

static int isStage2(void)
{
	char comm[17] = { 0 };
	return prctl(PR_GET_NAME, comm, 0, 0, 0) == 0 && strcmp(comm, STAGE2_NAME) == 0;
}

// execInit runs agentbox-init from fd; the exec closes the descriptor
// (close-on-exec), so the sandbox's first process never has it. It returns
// only if the exec failed.
static void execInit(int fd, char **argv, char **envp)
{
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
		return;
	syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
}

// glibc passes main's arguments to constructors.
__attribute__((constructor)) static void agentbox_fastinit(int argc, char **argv, char **envp)
{
	if (getenv("_LIBCONTAINER_INITPIPE") == NULL)
		return; // not a sandbox's init: the daemon, a CLI, a test binary
	if (isStage2()) {
		// nsenter's constructor ran first and set up the namespaces.
		int fd = initFd();
		if (fd >= 0)
			execInit(fd, argv, envp);
		return; // the daemon binary's Go init carries on
	}
	// Constructors run in link order, and nsenter's comes after this one
	// in the daemon: run its setup here, which returns only in the final
	// process (stage 2), inside the sandbox's namespaces.
	int fd = initFd();
	if (fd < 0)
		return; // nothing to switch to: nsenter's constructor does its part
	nsexec();
	execInit(fd, argv, envp);
	// The exec failed. nsenter's own constructor is still to run and must
	// not set the sandbox up a second time: hide the init pipe from it; the
	// Go side (package native's init) puts it back for libcontainer.Init.
	const char *pipe = getenv("_LIBCONTAINER_INITPIPE");
	if (pipe == NULL || setenv("_AGENTBOX_INITPIPE", pipe, 1) != 0 || unsetenv("_LIBCONTAINER_INITPIPE") != 0)
		_exit(255);
}
*/
import "C"
