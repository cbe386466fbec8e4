package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/version"
)

// buildInfo is what `agentbox version` reports: the build, and the
// backends compiled into this binary.
type buildInfo struct {
	version.Info
	Backends []string `json:"backends"`
}

func currentBuild() buildInfo {
	b := buildInfo{Info: version.Get(), Backends: []string{"native", "docker"}}
	if daemon.KubeLinked {
		b.Backends = append(b.Backends, "kube")
	}
	return b
}

// String is the human form, also what --version prints.
func (b buildInfo) String() string {
	backends := strings.Join(b.Backends, ", ")
	if !daemon.KubeLinked {
		backends += " (kube: agentbox-kube, the full build)"
	}
	return fmt.Sprintf("agentbox %s\n  commit    %s\n  built     %s\n  go        %s %s\n  backends  %s\n",
		b.Version, b.Commit, b.Date, b.GoVersion, b.Platform, backends)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "version",
		Short:             "Print the version, commit, build date, Go version and compiled-in backends",
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			b := currentBuild()
			if asJSON, _ := cmd.Flags().GetBool(flagJSON); asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(b)
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), b.String())
			return err
		},
	}
}
