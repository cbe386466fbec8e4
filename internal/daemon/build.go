package daemon

import (
	"log/slog"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/template/builder"
	"github.com/agentbox/agentbox/internal/template/builder/sandboxrunner"
)

// newBuilder makes the Dockerfile builder: RUN steps in build sandboxes of
// the manager (the operator's, never a tenant's), their secrets and cache
// mounts under the data dir (cache files owned, between steps, by ids: a
// range of host ids the native backend gives no sandbox), the step cache
// index next to the store whose templates it names (tmplDir).
func newBuilder(cfg *config.Config, dataDir, tmplDir string, st *template.Store, m sandboxrunner.Sandboxes, ids sandboxrunner.HostIDs, log *slog.Logger) (*builder.Builder, error) {
	dir := filepath.Join(dataDir, "build")
	// Build steps get the server's largest sandbox: installing packages
	// needs more than a tenant's default.
	res := cfg.MaxResources
	runner, err := sandboxrunner.New(sandboxrunner.Config{
		Sandboxes: m, Dir: filepath.Join(dir, "run"), Logger: log, IDs: ids,
		Resources: sandbox.Resources{MemoryBytes: res.MemoryBytes, CPUs: res.CPUs, PIDs: res.PIDs, DiskBytes: res.DiskBytes},
	})
	if err != nil {
		return nil, err
	}
	return builder.New(st, runner, filepath.Join(tmplDir, "build-cache"), log)
}
