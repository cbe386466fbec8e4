/*
 * agentbox-shim: the exec shim of the in-sandbox agent, as a small static C
 * program (make build: bin/agentbox-shim, mounted next to the agent).
 *
 * Every process the agent starts through its process API runs below a shim,
 * a child subreaper that starts the command and waits for it, so that a
 * timeout or a kill ends the command's whole tree however it detached
 * (setsid, double fork): see ShimArg in internal/agent/shim_linux.go, which
 * also holds the agent's side and the same shim in Go (the fallback when this
 * binary is not there). The protocol, on the unix stream socket that is fd 3,
 * per command:
 *
 *   agent -> shim: uint32 length with the command's stdin, stdout and stderr
 *                  attached (SCM_RIGHTS), then the request (shimproto.go)
 *   shim -> agent: int32 pid, int32 errno (pid 0: the exec failed; the shim
 *                  then waits for the next request)
 *   agent -> shim: 'K' kills the tree; EOF (the agent is gone) does too
 *   shim -> agent: uint32 wait status, byte 1 if the shim can take another
 *                  command (nothing was left behind)
 *   agent -> shim: 'D' when it takes the shim back; EOF ends it
 *
 * Integers are little-endian. Why C: a shim is started for a sandbox's first
 * command and then reused; as a Go program it cost ~2 ms of CPU to start,
 * three threads and a megabyte for as long as the sandbox lives, this one a
 * tenth of a millisecond, one task and a few pages.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHIM_FD 3
#define SHIM_KILL 'K'
#define SHIM_DONE 'D'
#define MAX_REQUEST (16u << 20)
#define MAX_GROUPS 65536u
/* Bounds the kill rounds against a tree that keeps forking; the pids limit
 * bounds what each round finds. */
#define KILL_SECONDS 10
#define REQUEST_VERSION 1
#define FLAG_PTY 1u
#define FLAG_CRED 2u
#define FLAG_NO_SETGROUPS 4u
/* The OOM score adjustment of every started process (childOOMScoreAdj). */
#define CHILD_OOM_SCORE_ADJ "500"

struct request {
	char *buf; /* owns every string below */
	uint32_t flags, uid, gid, ngroups;
	gid_t *groups;
	const char *path, *dir;
	char **argv, **envp;
	int fds[3];
};

static sigset_t old_mask;

static void die(const char *what)
{
	fprintf(stderr, "agentbox exec shim: %s: %s\n", what, strerror(errno));
	exit(127);
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v;
	p[1] = v >> 8;
	p[2] = v >> 16;
	p[3] = v >> 24;
}

/* send_all writes to the agent without SIGPIPE: a gone agent is an error. */
static int send_all(const void *b, size_t n)
{
	const char *p = b;
	while (n > 0) {
		ssize_t w = send(SHIM_FD, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* read_full fills b from the agent: 0, or -1 on EOF or error. */
static int read_full(void *b, size_t n)
{
	char *p = b;
	while (n > 0) {
		ssize_t r = read(SHIM_FD, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* read_byte reads one control byte: the byte, or -1 on EOF or error. */
static int read_byte(void)
{
	unsigned char b;
	for (;;) {
		ssize_t r = read(SHIM_FD, &b, 1);
		if (r < 0 && errno == EINTR)
			continue;
		return r == 1 ? b : -1;
	}
}

static void free_request(struct request *r)
{
	free(r->buf);
	free(r->argv);
	free(r->envp);
	for (int i = 0; i < 3; i++)
		if (r->fds[i] >= 0)
			close(r->fds[i]);
	memset(r, 0, sizeof *r);
	r->fds[0] = r->fds[1] = r->fds[2] = -1;
}

/* next_string returns the NUL-terminated string at *pos of buf[0:len] and
 * moves *pos past it, or NULL when the buffer ends first. */
static char *next_string(char *buf, uint32_t len, uint32_t *pos)
{
	if (*pos >= len)
		return NULL;
	char *s = buf + *pos;
	char *end = memchr(s, 0, len - *pos);
	if (end == NULL)
		return NULL;
	*pos = (uint32_t)(end - buf) + 1;
	return s;
}

/* receive reads one request: 1 when it has one, 0 when the agent closed the
 * socket while the shim was idle. Anything malformed ends the shim. */
static int receive(struct request *r)
{
	unsigned char hdr[4];
	union {
		char buf[CMSG_SPACE(3 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
	ssize_t n;
	do
		n = recvmsg(SHIM_FD, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		die("receive request");
	if (n == 0)
		return 0;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (c == NULL || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(3 * sizeof(int)) ||
	    (msg.msg_flags & MSG_CTRUNC)) {
		errno = EPROTO;
		die("request without its three descriptors");
	}
	memcpy(r->fds, CMSG_DATA(c), 3 * sizeof(int));
	if (read_full(hdr + n, sizeof hdr - (size_t)n) < 0)
		die("read request");
	uint32_t len = le32(hdr);
	if (len < 24 || len > MAX_REQUEST) {
		errno = EPROTO;
		die("request size");
	}
	unsigned char *b = malloc(len);
	if (b == NULL)
		die("allocate request");
	r->buf = (char *)b;
	if (read_full(b, len) < 0)
		die("read request");
	if (b[0] != REQUEST_VERSION) {
		errno = EPROTO;
		die("request version");
	}
	r->flags = b[1];
	r->uid = le32(b + 4);
	r->gid = le32(b + 8);
	r->ngroups = le32(b + 12);
	uint32_t argc = le32(b + 16), envc = le32(b + 20);
	uint32_t pos = 24;
	/* Every string (path, dir, argv, env) takes at least its NUL: counts
	 * the rest of the request cannot hold are refused before allocating. */
	if (r->ngroups > MAX_GROUPS || r->ngroups > (len - pos) / 4 || argc == 0 ||
	    (uint64_t)argc + envc + 2 > len - pos - 4 * r->ngroups) {
		errno = EPROTO;
		die("request counts");
	}
	r->groups = (gid_t *)(b + pos); /* reinterpreted below in place */
	for (uint32_t i = 0; i < r->ngroups; i++) {
		gid_t g = le32(b + pos + 4 * i);
		memcpy(b + pos + 4 * i, &g, sizeof g); /* gid_t is 4 bytes on Linux */
	}
	pos += 4 * r->ngroups;
	r->argv = calloc((size_t)argc + 1, sizeof(char *));
	r->envp = calloc((size_t)envc + 1, sizeof(char *));
	if (r->argv == NULL || r->envp == NULL)
		die("allocate request");
	r->path = next_string(r->buf, len, &pos);
	r->dir = next_string(r->buf, len, &pos);
	for (uint32_t i = 0; i < argc; i++)
		r->argv[i] = next_string(r->buf, len, &pos);
	for (uint32_t i = 0; i < envc; i++)
		r->envp[i] = next_string(r->buf, len, &pos);
	if (r->path == NULL || r->dir == NULL || (argc > 0 && r->argv[argc - 1] == NULL) ||
	    (envc > 0 && r->envp[envc - 1] == NULL) || pos != len) {
		errno = EPROTO;
		die("malformed request");
	}
	return 1;
}

/* drop_bounding_set empties the calling process's capability bounding set;
 * a capability it cannot drop is an error unless it is not in the set. */
static int drop_bounding_set(void)
{
	for (int c = 0;; c++) {
		int in = prctl(PR_CAPBSET_READ, c, 0, 0, 0);
		if (in < 0)
			return errno == EINVAL ? 0 : -1; /* EINVAL: past the last one */
		if (in == 1 && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0)
			return -1;
	}
}

/* start forks the command. In the child, in the order Go's ForkExec uses
 * (the Go shim's and the agent's own starts): session or process group,
 * credentials, working directory, standard descriptors, controlling
 * terminal, the signal mask back, exec. Returns the pid, or 0 with the
 * errno of the failed step in *err. */
static pid_t start(const struct request *r, int *err)
{
	int ep[2];
	if (pipe2(ep, O_CLOEXEC) < 0) {
		*err = errno;
		return 0;
	}
	pid_t pid = fork();
	if (pid < 0) {
		*err = errno;
		close(ep[0]);
		close(ep[1]);
		return 0;
	}
	if (pid == 0) {
		int e;
		if (r->flags & FLAG_PTY) {
			if (setsid() < 0)
				goto fail;
		} else if (setpgid(0, 0) < 0) {
			goto fail;
		}
		if (r->flags & FLAG_CRED) {
			/* A user other than root gets no capability bounding set
			 * (the agent's forkThread): it holds no capability and
			 * can never gain one. */
			if (r->uid != 0 && drop_bounding_set() < 0)
				goto fail;
			if (!(r->flags & FLAG_NO_SETGROUPS) && setgroups(r->ngroups, r->groups) < 0)
				goto fail;
			if (setgid(r->gid) < 0 || setuid(r->uid) < 0)
				goto fail;
		}
		if (chdir(r->dir) < 0)
			goto fail;
		/* Move descriptors that sit where another belongs out of the way
		 * first, then put each in place (dup2 clears close-on-exec). */
		int fds[3];
		for (int i = 0; i < 3; i++) {
			fds[i] = r->fds[i];
			if (fds[i] < 3) {
				fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
				if (fds[i] < 0)
					goto fail;
			}
		}
		for (int i = 0; i < 3; i++)
			if (dup2(fds[i], i) < 0)
				goto fail;
		if ((r->flags & FLAG_PTY) && ioctl(0, TIOCSCTTY, 1) < 0)
			goto fail;
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
		execve(r->path, r->argv, r->envp);
	fail:
		e = errno;
		(void)!write(ep[1], &e, sizeof e);
		_exit(127);
	}
	close(ep[1]);
	int e = 0;
	ssize_t n;
	do
		n = read(ep[0], &e, sizeof e);
	while (n < 0 && errno == EINTR);
	close(ep[0]);
	if (n == (ssize_t)sizeof e) {
		/* The exec failed: reap the child, report its errno. */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		*err = e ? e : EINVAL;
		return 0;
	}
	return pid;
}

/* has_children reports whether any process (running, stopped or a zombie)
 * is still a child of the shim, consuming nothing. In doubt: yes. */
static int has_children(void)
{
	siginfo_t info;
	for (;;) {
		memset(&info, 0, sizeof info);
		if (waitid(P_ALL, 0, &info, WEXITED | WSTOPPED | WCONTINUED | WNOHANG | WNOWAIT | __WALL) == 0)
			return 1;
		if (errno == EINTR)
			continue;
		return errno != ECHILD;
	}
}

/* kill_children sends SIGKILL to every child of the shim. Orphans of the
 * killed are re-parented to the shim (a subreaper) and met next round. */
static void kill_children(void)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return;
	int pid;
	while (fscanf(f, "%d", &pid) == 1)
		if (pid > 0)
			kill(pid, SIGKILL);
	fclose(f);
}

/* supervise waits for the command to end and returns its wait status. A
 * 'K' from the agent, or the agent going away, ends every process below
 * the shim first. *gone is set when the agent went away. */
static int supervise(pid_t cmd, int sfd, int *gone)
{
	int status = 0, ended = 0, killing = 0;
	struct timespec deadline = {0};
	for (;;) {
		/* Once the agent is gone its socket stays readable (EOF): it is
		 * polled no more. While killing, wake every millisecond for the
		 * next round. */
		struct pollfd p[2] = {{.fd = *gone ? -1 : SHIM_FD, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		int n = poll(p, 2, killing ? 1 : -1);
		if (n < 0 && errno != EINTR)
			die("poll");
		if (n > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) && !*gone) {
			int b = read_byte();
			if (b < 0) {
				*gone = 1;
				killing = 1;
			} else if (b == SHIM_KILL && !ended) {
				killing = 1;
			}
		}
		if (n > 0 && (p[1].revents & POLLIN)) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
				;
		}
		int st;
		pid_t got;
		while ((got = waitpid(-1, &st, WNOHANG | __WALL)) > 0)
			if (got == cmd) {
				status = st;
				ended = 1;
			}
		if (ended && !killing)
			return status; /* what it left behind lives on */
		if (killing) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (deadline.tv_sec == 0) {
				deadline = now;
				deadline.tv_sec += KILL_SECONDS;
			}
			if (ended && !has_children())
				return status; /* everything below the shim is gone */
			if (now.tv_sec < deadline.tv_sec ||
			    (now.tv_sec == deadline.tv_sec && now.tv_nsec < deadline.tv_nsec))
				kill_children();
			else if (ended)
				return status; /* a tree that outran every round: it is
						  left to the agent with the shim */
		}
	}
}

int main(void)
{
	if (fcntl(SHIM_FD, F_SETFD, FD_CLOEXEC) < 0)
		die("fd 3");
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		die("prctl(PR_SET_CHILD_SUBREAPER)");
	/* Requests carry other commands' environments: keep the shim's memory
	 * out of reach of the sandbox's processes. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		die("prctl(PR_SET_DUMPABLE)");
	/* Inherited by the commands: the OOM killer picks them, not the agent. */
	int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (oom >= 0) {
		(void)!write(oom, CHILD_OOM_SCORE_ADJ, strlen(CHILD_OOM_SCORE_ADJ));
		close(oom);
	}
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, &old_mask) < 0)
		die("sigprocmask");
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		die("signalfd");

	struct request r;
	memset(&r, 0, sizeof r);
	r.fds[0] = r.fds[1] = r.fds[2] = -1;
	for (;;) {
		if (!receive(&r))
			return 0; /* the agent let go of an idle shim */
		int err = 0;
		pid_t pid = start(&r, &err);
		free_request(&r);
		unsigned char msg[8] = {0};
		if (pid == 0) {
			put32(msg + 4, (uint32_t)err);
			if (send_all(msg, sizeof msg) < 0)
				return 0;
			continue;
		}
		put32(msg, (uint32_t)pid);
		if (send_all(msg, sizeof msg) < 0) {
			kill(-pid, SIGKILL);
			return 1;
		}
		int gone = 0;
		int status = supervise(pid, sfd, &gone);
		int reusable = !gone && !has_children();
		unsigned char st[5];
		put32(st, (uint32_t)status);
		st[4] = (unsigned char)reusable;
		if (gone || send_all(st, sizeof st) < 0 || !reusable)
			return 0;
		/* Wait to be taken back; a late 'K' meets a command that ended. */
		int b;
		while ((b = read_byte()) == SHIM_KILL)
			;
		if (b != SHIM_DONE)
			return 0;
	}
}
