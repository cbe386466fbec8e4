// Command agentbox-agent is the in-sandbox agent. It runs as PID 1 of a
// sandbox, reaps zombies, and serves E2B's envd protocol (process and
// filesystem services, /files, /envs, /health) and the code interpreter's
// stateful execution routes (/execute, /contexts) on a unix socket or TCP.
//
//	agentbox-agent --listen unix:///run/agentbox/agent.sock --workdir /workspace [--user UID:GID] [--ready-fd N] [--seccomp-fd N] [--rlimits nofile=S:H,core=S:H] [--listen-also tcp://0.0.0.0:PORT]
//	agentbox-agent install PATH   (copies itself to PATH: the kube backend's init container)
//
// With --seccomp-fd the agent first installs the seccomp BPF program it
// reads from that descriptor (the backend compiles the sandbox profile once,
// so every sandbox skips that work), and refuses to start if it cannot.
//
// With --user the agent, running as root (of its sandbox's user namespace),
// acts as UID:GID for every request that names no user, and as root or
// another user only when a request asks for one.
//
// AGENTBOX_SERVICE, when set, is the JSON of the sandbox.Service the agent
// starts once it listens and supervises (GET /service reports its state).
// An environment variable of PID 1 because the sandbox cannot touch it:
// nothing of the sandbox runs before the agent reads it, and the agent is
// not dumpable (/proc/1/environ is unreadable to the sandbox).
//
// AGENTBOX_ACCESS_TOKEN, when set, is required as X-Access-Token on every
// request but GET /health. All AGENTBOX_* variables are removed from the
// environment before anything is started.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/seccompload"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == agent.ShimArg {
		// A supervisor of one process: see agent.ShimArg.
		os.Exit(agent.RunShim(os.Args[2:]))
	}
	if len(os.Args) == 3 && os.Args[1] == "install" {
		// An init container's job on Kubernetes: put this static binary
		// into a volume the sandbox's own image then runs it from.
		if err := install(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "agentbox-agent install:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agentbox-agent:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "unix:///run/agentbox/agent.sock", "address to serve on: unix:///path, tcp://host:port, or fd://N (an inherited listening socket)")
	listenAlso := flag.String("listen-also", "", "a second address to serve on (tcp://host:port): the pod IP of a sandbox on an agentbox Kubernetes node; needs AGENTBOX_ACCESS_TOKEN")
	readyFD := flag.Int("ready-fd", -1, "file descriptor to write one byte to (and close) once listening")
	workdir := flag.String("workdir", "/workspace", "default working directory of processes (falls back to the user's home)")
	logLevel := flag.String("log-level", "info", "debug, info, warn or error")
	seccompFD := flag.Int("seccomp-fd", -1, "file descriptor holding a seccomp BPF program to install before anything else")
	rlimits := flag.String("rlimits", "", "resource limits of the agent and everything it starts: name=soft:hard,... (nofile, core)")
	shimPath := flag.String("shim", "", "agentbox-shim, the exec shim to start commands under (default: this binary, re-executed)")
	user := flag.String("user", "", "UID:GID that requests naming no user act as (default: the agent's own); other than the agent's own only for an agent running as root")
	flag.Parse()
	var defaultUser *agent.Identity
	if *user != "" {
		id, err := agent.ParseIdentity(*user)
		if err != nil {
			return fmt.Errorf("--user: %w", err)
		}
		if os.Getuid() != 0 && (id.UID != uint32(os.Getuid()) || id.GID != uint32(os.Getgid())) {
			return fmt.Errorf("--user %s: only an agent running as root acts as another user (this one runs as uid %d)", *user, os.Getuid())
		}
		defaultUser = &id
	}

	// First of all: every process of the sandbox (the exec shims the
	// server starts ahead of need included) inherits these.
	if err := agent.ApplyRlimits(*rlimits); err != nil {
		return err
	}

	if *seccompFD >= 0 {
		// Before any other work: nothing the sandbox runs may start unfiltered.
		if err := seccompload.InstallFromFd(*seccompFD); err != nil {
			return fmt.Errorf("install seccomp filter: %w", err)
		}
	}
	// Non-dumpable: the sandbox's own processes (same uid) cannot read the
	// agent's memory, environment (the access token) or file descriptors
	// through /proc/1.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	token := os.Getenv("AGENTBOX_ACCESS_TOKEN")
	control := os.Getenv("AGENTBOX_CONTROL_TOKEN")
	onlyUser := os.Getenv("AGENTBOX_ONLY_USER_REASON")
	service, err := serviceFromEnv()
	if err != nil {
		return err
	}
	scrubEnv()

	// Before anything is started: no signal from a sandbox process may end
	// the agent. As PID 1 the host stops the sandbox with SIGKILL, so no
	// signal means "terminate"; run by hand (not PID 1) SIGTERM and SIGINT
	// shut down gracefully, cleaning up the children.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if os.Getpid() == 1 {
		agent.IgnoreStraySignals(log)
	} else {
		agent.IgnoreStraySignals(log, syscall.SIGTERM, syscall.SIGINT)
		var stopSignal context.CancelFunc
		ctx, stopSignal = signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
		defer stopSignal()
	}

	// The exec shim is agentbox-shim when the host mounted it, else this
	// very binary, also when it was replaced or removed on the host
	// meanwhile.
	shim, shimExternal := *shimPath, true
	if shim != "" {
		if err := unix.Access(shim, unix.X_OK); err != nil {
			log.Warn("exec shim not usable; using the agent itself", "shim", shim, "err", err)
			shim = ""
		}
	}
	if shim == "" {
		shim, shimExternal = "/proc/self/exe", false
		if _, err := os.Stat(shim); err != nil {
			if shim, err = os.Executable(); err != nil {
				return fmt.Errorf("find the agent's executable (the exec shim): %w", err)
			}
		}
	}
	var reset *agent.ResetConfig
	if control != "" && *listenAlso == "" {
		// The host's warm reset (see agent.ResetConfig).
		reset = &agent.ResetConfig{ControlToken: control}
	}
	srv := agent.NewServer(agent.Config{
		Shim:         shim,
		ShimExternal: shimExternal,
		Workdir:      *workdir,
		AccessToken:  token,
		Env:          os.Environ(),
		Logger:       log,
		Service:      service,
		Reset:        reset,
		DefaultUser:  defaultUser,
		DeferShims:   true,
		// Set by the native backend for gVisor sandboxes (gvisor.go).
		OnlyDefaultUser: onlyUser,
	})
	ln, err := agent.Listen(*listen)
	if err != nil {
		return err
	}
	var lnAlso net.Listener
	if *listenAlso != "" {
		// Reachable from outside the sandbox: never without a token.
		if token == "" {
			return errors.New("--listen-also needs an access token (AGENTBOX_ACCESS_TOKEN)")
		}
		if lnAlso, err = agent.Listen(*listenAlso); err != nil {
			return err
		}
	}
	if *readyFD >= 0 {
		if err := agent.NotifyReady(*readyFD); err != nil {
			return err
		}
	}
	log.Info("agent listening", "addr", *listen, "pid", os.Getpid(), "uid", os.Getuid(), "user", *user)

	serveErr := make(chan error, 2)
	if lnAlso != nil {
		// The host keeps its access when a caller replaces the token on
		// the reachable listener (POST /init).
		go func() { serveErr <- srv.ServeHost(ctx, ln) }()
	} else {
		go func() { serveErr <- srv.Serve(ctx, ln) }()
	}
	if lnAlso != nil {
		log.Info("agent listening", "addr", *listenAlso)
		go func() { serveErr <- srv.Serve(ctx, lnAlso) }()
	}
	// After ready: the first shim's start would compete with ours.
	srv.StartShims()
	srv.StartService(ctx)
	select {
	case err = <-serveErr:
	case <-ctx.Done():
		log.Info("terminating")
	}
	grace, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	srv.Shutdown(grace)
	stop()
	if err == nil {
		err = <-serveErr
	}
	return err
}

// install copies the running binary to dst (mode 0555), through a
// temporary file renamed into place so dst is never half written.
func install(dst string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_EXCL, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		os.Remove(tmp)
		return fmt.Errorf("copy to %s: %w", tmp, err)
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// scrubEnv removes the agent's own configuration from the environment so
// no process it starts can read it.
func scrubEnv() {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AGENTBOX_") {
			_ = os.Unsetenv(k) // fails only for an invalid name, which Environ cannot hold
		}
	}
}

// serviceFromEnv reads the service definition the backend passed.
func serviceFromEnv() (*sandbox.Service, error) {
	raw := os.Getenv("AGENTBOX_SERVICE")
	if raw == "" {
		return nil, nil
	}
	var svc sandbox.Service
	if err := json.Unmarshal([]byte(raw), &svc); err != nil {
		return nil, fmt.Errorf("AGENTBOX_SERVICE: %w", err)
	}
	return &svc, nil
}
