package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/doctor"
)

func newDoctorCmd() *cobra.Command {
	var (
		configFile, dataDir string
		sets                []string
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this host for what agentbox needs, and say how to fix what is missing",
		Long: `Checks this host for what the daemon needs with the settings "agentbox serve"
would read (the environment, --config FILE, --set NAME=VALUE): the kernel,
cgroups and their controllers, user namespaces and the sandboxes' host id
ranges, overlayfs, loop devices, mkfs.ext4, seccomp, nftables, the agent
binary, the data dir, the Docker engine and the Kubernetes API server when
their backends are on, the built-in templates and Node.js (for the web
console's build). Each line says ok, warn, missing or skip, what was found
and the fix. Exit status 1 when something required is missing. Run it as
the user the daemon runs as (root).`,
		Example: `  sudo agentbox doctor
  sudo agentbox doctor --config agentbox.env --json`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, _ := cmd.Flags().GetBool(flagJSON)
			overrides := map[string]string{}
			if cmd.Flags().Changed("data-dir") {
				overrides["AGENTBOX_DATA_DIR"] = dataDir
			}
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return finish(cmd.ErrOrStderr(), asJSON, usageErrorf("--set %q: want NAME=VALUE", kv))
				}
				overrides[k] = v
			}
			settings := doctor.Result{Name: "settings", Status: doctor.OK, Detail: "defaults, the environment"}
			if configFile != "" {
				settings.Detail += ", " + configFile
			}
			if len(overrides) > 0 {
				settings.Detail += ", flags"
			}
			cfg, err := config.Load(configFile, os.Environ(), overrides)
			if err != nil {
				settings.Status = doctor.Missing
				settings.Detail = err.Error() + " (the checks below use the defaults)"
				settings.Fix = "correct the setting: agentbox serve --help-settings lists them (docs/configuration.md)"
				if cfg, err = config.Load("", nil, nil); err != nil {
					return err
				}
			}
			if cfg.Kube.Enabled && !daemon.KubeLinked && kubeBinaryBeside() {
				// As serve does: the full build checks the cluster.
				return execKube()
			}
			results := append([]doctor.Result{settings}, doctor.Run(cmd.Context(), doctor.FromConfig(cfg))...)
			out := cmd.OutOrStdout()
			var missing []string
			for _, r := range results {
				if r.Status == doctor.Missing {
					missing = append(missing, r.Name)
				}
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					OK     bool            `json:"ok"`
					Checks []doctor.Result `json:"checks"`
				}{len(missing) == 0, results}); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					line := fmt.Sprintf("%-7s  %-15s  %s", r.Status, r.Name, r.Detail)
					if r.Fix != "" {
						line += " — fix: " + r.Fix
					}
					fmt.Fprintln(out, line)
				}
			}
			if len(missing) == 0 {
				return nil
			}
			if asJSON {
				return &exitError{code: 1} // the JSON says it all
			}
			what := "a required check is missing: " + missing[0] + " (the fix is above)"
			if len(missing) > 1 {
				what = fmt.Sprintf("%d required checks are missing: %s (the fixes are above)", len(missing), strings.Join(missing, ", "))
			}
			return &exitError{code: 1, msg: what}
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a .env file of settings, as agentbox serve --config")
	f.StringVar(&dataDir, "data-dir", "", "state directory (AGENTBOX_DATA_DIR)")
	f.StringArrayVar(&sets, "set", nil, "any setting, NAME=VALUE (repeatable)")
	return cmd
}

// kubeBinaryBeside reports whether agentbox-kube is next to this binary.
func kubeBinaryBeside() bool {
	self, err := native.Executable()
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(filepath.Dir(self), kubeBinary))
	return err == nil
}
