package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

type runOptions struct {
	memory, disk, template, workdir, dataDir string
	cpus                                     float64
	pids                                     int64
	timeout                                  time.Duration
	env                                      []string
	root, noStdin                            bool
}

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run one command in a fresh sandbox, then destroy it (no daemon needed)",
		Long: `Creates a sandbox, runs COMMAND in it with stdin, stdout and stderr passed
through, destroys the sandbox and exits with COMMAND's exit code — like
"docker run --rm".

Without --url (or AGENTBOX_URL) the sandbox is made on this host by this
process, no daemon involved: as root every limit applies; as another user it
runs rootless (user namespace only: no memory, CPU, process or disk limits).
With --url the server at that address makes it (its limits, its warm pool,
any user with an API key): the command's input and output still stream both
ways, byte for byte.

Exit codes: COMMAND's own; 124 when --timeout killed it; 137 when it was
killed by a signal (the OOM killer included); 141 when its output could not
be written because the reader went away (as "| head" does); 125 when the
sandbox could not be created.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			url, _ := f.GetString(flagURL)
			if url == "" {
				url = os.Getenv(client.EnvURL)
			}
			if url != "" {
				key, _ := f.GetString(flagAPIKey)
				if key == "" {
					key = os.Getenv(client.EnvAPIKey)
				}
				return runViaServer(cmd.Context(), o, f.Changed("template"), args, url, key)
			}
			return runOneShot(cmd.Context(), o, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.memory, "memory", "", "memory limit, e.g. 256M (default 512M)")
	f.Float64Var(&o.cpus, "cpus", 0, "CPU quota in cores, e.g. 0.5 (default 1)")
	f.Int64Var(&o.pids, "pids", 0, "maximum processes and threads (default 256)")
	f.StringVar(&o.disk, "disk", "", "disk size for /workspace and home (default 1G)")
	f.DurationVar(&o.timeout, "timeout", 0, "kill the command after this long (default: no limit)")
	f.StringVar(&o.template, "template", "host", `root filesystem: "host" or "dir:/path/to/rootfs"`)
	f.StringVarP(&o.workdir, "workdir", "w", "", "working directory inside the sandbox (default /workspace)")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.BoolVar(&o.root, "root", false, "run as root inside a user namespace")
	f.BoolVar(&o.noStdin, "no-stdin", false, "do not pass stdin through")
	f.StringVar(&o.dataDir, "data-dir", "", "state directory (default $AGENTBOX_DATA_DIR, /var/lib/agentbox as root, ~/.cache/agentbox otherwise)")
	_ = cmd.RegisterFlagCompletionFunc("template", completeRunTemplate)
	return cmd
}

func runOneShot(ctx context.Context, o runOptions, args []string) error {
	spec, err := o.spec()
	if err != nil {
		return err
	}
	agentPath, err := daemon.FindAgent(os.Getenv("AGENT_PATH"))
	if err != nil {
		return &exitError{code: 125, msg: err.Error()}
	}
	dataDir := o.dataDir
	if dataDir == "" {
		dataDir = os.Getenv("AGENTBOX_DATA_DIR")
	}
	if dataDir == "" {
		dataDir = config.DefaultDataDir() // serve's too
	}
	// The one setting of the daemon's a run reads: whether it may tune the
	// host's cgroup2 mount (see CGROUP_FAVOR_DYNMODS).
	favor := true
	if v := os.Getenv("CGROUP_FAVOR_DYNMODS"); v != "" {
		if favor, err = config.ParseBool(v); err != nil {
			return &exitError{code: 125, msg: fmt.Sprintf("CGROUP_FAVOR_DYNMODS=%q: %v", v, err)}
		}
	}
	b, err := native.New(native.Config{Root: filepath.Join(dataDir, "oneshot"), AgentPath: agentPath, LeaveCgroupMounts: !favor})
	if err != nil {
		return &exitError{code: 125, msg: err.Error()}
	}
	// Last: with no sandbox of any run left, the backend's state tmpfs and
	// cgroup go too (a concurrent run's sandbox keeps them).
	defer b.Close()

	// Ctrl-C or a kill still destroys the sandbox: the signal cancels ctx,
	// the process is killed, and the deferred Destroy runs.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// So does a reader that goes away (`agentbox run ... | head`): Go ends
	// a process writing to a closed stdout or stderr by SIGPIPE, before
	// any deferred call, unless SIGPIPE is notified; then the write fails
	// with EPIPE and the run ends below like a shell's pipeline writer.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	owners := filepath.Join(dataDir, "oneshot", "owners")
	reapAbandoned(ctx, b, owners)
	// Claimed before it exists, given up once it is destroyed; a destroy
	// that fails leaves the claim's file for the next run to reap.
	claim, err := lockOwner(owners, spec.ID)
	if err != nil {
		return &exitError{code: 125, msg: err.Error()}
	}
	info, err := b.Create(ctx, spec)
	if err != nil {
		claim.release() // a failed create removes what it made
		return &exitError{code: 125, msg: "create sandbox: " + err.Error()}
	}
	defer func() {
		if err := b.Destroy(context.WithoutCancel(ctx), info.ID); err != nil {
			fmt.Fprintf(os.Stderr, "agentbox run: destroy sandbox %s: %v (the next run removes it)\n", info.ID, err)
			claim.abandon()
			return
		}
		claim.release()
	}()

	ac := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
	defer ac.Close()
	return runCommand(ctx, ac, o, args, func() bool {
		st, err := b.Stats(context.WithoutCancel(ctx), info.ID)
		return err == nil && st.OOMKills > 0
	})
}

// runCommand runs args through the sandbox's agent with this process's
// standard streams and turns how it ended into run's exit (see the
// command's help); oomKilled tells whether the sandbox's memory limit
// killed something.
func runCommand(ctx context.Context, ac *agentclient.Client, o runOptions, args []string, oomKilled func() bool) error {
	var stdin io.Reader
	if !o.noStdin {
		stdin = os.Stdin
	}
	res, err := ac.Run(ctx, agentclient.StartOptions{
		Cmd: args[0], Args: args[1:], Cwd: o.workdir, Timeout: o.timeout,
	}, stdin, os.Stdout, os.Stderr)
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: 130}
		}
		if errors.Is(err, syscall.EPIPE) {
			return &exitError{code: 128 + int(syscall.SIGPIPE)} // as a shell reports a writer killed by SIGPIPE
		}
		return &exitError{code: 125, msg: err.Error()}
	}
	switch {
	case res.Exited:
		return exitCode(res.ExitCode)
	case o.timeout > 0 && res.Status == "killed":
		return &exitError{code: 124, msg: fmt.Sprintf("killed after --timeout %s", o.timeout)}
	}
	if oomKilled() {
		return &exitError{code: 137, msg: "killed: out of memory (raise --memory)"}
	}
	return &exitError{code: 137, msg: res.Status}
}

func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

func (o runOptions) spec() (sandbox.Spec, error) {
	tmpl, err := manager.ConfiguredTemplate(o.template, o.template)
	if err != nil {
		return sandbox.Spec{}, fmt.Errorf("--template: %w", err)
	}
	memory, disk, env, err := o.limitsAndEnv()
	if err != nil {
		return sandbox.Spec{}, err
	}
	return sandbox.Spec{ID: sandbox.NewID(), Template: tmpl, Root: o.root, Env: env,
		Resources: sandbox.Resources{CPUs: o.cpus, PIDs: o.pids, MemoryBytes: memory, DiskBytes: disk}}, nil
}

// limitsAndEnv parses --memory and --disk (0 when not given) and --env.
func (o runOptions) limitsAndEnv() (memory, disk int64, env map[string]string, err error) {
	if o.memory != "" {
		if memory, err = config.ParseSize(o.memory); err != nil {
			return 0, 0, nil, fmt.Errorf("--memory: %w", err)
		}
	}
	if o.disk != "" {
		if disk, err = config.ParseSize(o.disk); err != nil {
			return 0, 0, nil, fmt.Errorf("--disk: %w", err)
		}
	}
	env = map[string]string{}
	for _, kv := range o.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return 0, 0, nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		env[k] = v
	}
	return memory, disk, env, nil
}
