package main

import (
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
			return runWithSettings(configFile, sets, map[string]string{}, daemon.RunNode, startOptions{
				needsKube: func(*config.Config) bool { return true },
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a .env file of settings")
	f.StringArrayVar(&sets, "set", nil, "any setting, NAME=VALUE (repeatable)")
	return cmd
}
