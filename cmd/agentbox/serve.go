package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
)

func newServeCmd() *cobra.Command {
	var (
		configFile, host, dataDir, backendName string
		port, poolSize                         int
		sets                                   []string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the agentbox API server",
		Long: `Runs the API server. Settings come from (lowest to highest precedence):
built-in defaults, the .env file given with --config, the environment, and
flags. Run "agentbox serve --help-settings" for every setting.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if help, _ := cmd.Flags().GetBool("help-settings"); help {
				printSettings()
				return nil
			}
			overrides := map[string]string{}
			f := cmd.Flags()
			if f.Changed("host") {
				overrides["HOST"] = host
			}
			if f.Changed("port") {
				overrides["PORT"] = strconv.Itoa(port)
			}
			if f.Changed("data-dir") {
				overrides["AGENTBOX_DATA_DIR"] = dataDir
			}
			if f.Changed("backend") {
				overrides["CONTAINER_DEPLOYMENT"] = backendName
			}
			if f.Changed("pool-size") {
				overrides["POOL_SIZE"] = strconv.Itoa(poolSize)
			}
			return runWithSettings(configFile, sets, overrides, daemon.Run, startOptions{
				needsKube: func(cfg *config.Config) bool { return cfg.Kube.Enabled },
				seal:      true,
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a .env file of settings")
	f.StringVar(&host, "host", "", "address to listen on (HOST)")
	f.IntVar(&port, "port", 0, "port to listen on (PORT)")
	f.StringVar(&dataDir, "data-dir", "", "state directory (AGENTBOX_DATA_DIR)")
	f.StringVar(&backendName, "backend", "", "backend of the sandbox types: native, docker or kube (CONTAINER_DEPLOYMENT)")
	f.IntVar(&poolSize, "pool-size", 0, "warm sandboxes per default type (POOL_SIZE)")
	f.StringArrayVar(&sets, "set", nil, "any setting, NAME=VALUE (repeatable)")
	f.Bool("help-settings", false, "list every setting with its default")
	return cmd
}

func newLogger(cfg *config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func printSettings() {
	s := config.Settings()
	sort.Slice(s, func(i, j int) bool { return s[i][0] < s[j][0] })
	for _, row := range s {
		fmt.Printf("%-24s default %-28q %s\n", row[0], row[1], row[2])
	}
}

// runWithSettings loads the settings (environment, the .env file, the
// --set NAME=VALUE flags over overrides) and runs run until SIGINT or
// SIGTERM: the daemon (serve) and the Kubernetes node (node) start alike.
// When the settings need Kubernetes support and this build has none, the
// process becomes agentbox-kube instead (see execKube).
func runWithSettings(configFile string, sets []string, overrides map[string]string, run func(context.Context, daemon.Options) error, opts startOptions) error {
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--set %q: want NAME=VALUE", kv)
		}
		overrides[k] = v
	}
	cfg, err := config.Load(configFile, os.Environ(), overrides)
	if err != nil {
		return err
	}
	if opts.needsKube(cfg) && !daemon.KubeLinked {
		return execKube()
	}
	if opts.seal {
		// A daemon starts many sandboxes: it runs from a sealed copy of
		// itself (see native.SealSelf), made here rather than first thing
		// in main so that a hand-off to agentbox-kube does not copy this
		// binary first.
		native.SealSelf()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, daemon.Options{Config: cfg, Logger: newLogger(cfg), Banner: os.Stdout})
}

// startOptions says how runWithSettings starts a long-running command.
type startOptions struct {
	// needsKube reports whether the settings need the Kubernetes build.
	needsKube func(*config.Config) bool
	// seal re-executes the process from a sealed copy of its binary.
	seal bool
}
