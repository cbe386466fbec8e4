package daemon

import (
	"context"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/internal/compat/daytona"
	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// daytonaDoor is Daytona's API (control plane under /api, the toolbox
// under /api/toolbox/{id}) over the manager and the shared data plane.
func (s *server) daytonaDoor(dp *dataplane.Service) *daytona.Server {
	cfg := s.cfg
	dcfg := daytona.Config{DataPlane: dp, APIKeys: cfg.APIKeys, MaxTimeout: cfg.MaxTimeout,
		MaxOutput: cfg.MaxExecOutputBytes, Logger: s.log, PreviewToken: s.previewToken,
		// Snapshots are templates, built by the template builder.
		TemplateAdmins: cfg.TemplateAdmins, BuildDir: filepath.Join(s.tmplDir, "tmp"), MaxContextBytes: cfg.TemplateMaxImport}
	if s.templates != nil {
		dcfg.Templates = s.templates
	}
	if s.builder != nil {
		dcfg.Builder = s.builder
	}
	if shared(s.store) {
		// A sandbox addressed by name is served by the replica that runs
		// it (by ID the forwarder routes it before the door).
		dcfg.Peers = s.forwarder
	}
	return daytona.New(dcfg, s.m)
}

// previewToken is the shared server's (made after its doors).
func (s *server) previewToken(ctx context.Context, owner string, id sandbox.ID, port int, ttl time.Duration) (string, string, error) {
	return s.api.PreviewToken(ctx, owner, id, port, ttl)
}
