package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
)

// newNodeCmd is `agentbox node`: a Kubernetes node whose pods run as
// native sandboxes (docs/kubernetes.md).
func newNodeCmd() *cobra.Command {
	var (
		configFile string
		sets       []string
	)
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a Kubernetes node (virtual-kubelet) whose pods run as agentbox sandboxes",
		Long: `Registers a Node (tainted agentbox.dev/sandbox-node=true:NoSchedule) with the
cluster of KUBE_NODE_KUBECONFIG (or the pod's service account) and runs the pods
bound to it as native agentbox sandboxes on this host, serving their logs and exec
through a kubelet API. Settings as for "agentbox serve" plus KUBE_NODE_*; see
docs/kubernetes.md and docs/configuration.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			overrides := map[string]string{}
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
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return daemon.RunNode(ctx, daemon.Options{Config: cfg, Logger: newLogger(cfg)})
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a .env file of settings")
	f.StringArrayVar(&sets, "set", nil, "any setting, NAME=VALUE (repeatable)")
	return cmd
}
