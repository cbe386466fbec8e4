package daemon

import (
	"github.com/agentbox/agentbox/internal/compat/daytona"
	"github.com/agentbox/agentbox/internal/dataplane"
)

// daytonaDoor is Daytona's API (control plane under /api, the toolbox
// under /api/toolbox/{id}) over the manager and the shared data plane.
func (s *server) daytonaDoor(dp *dataplane.Service) *daytona.Server {
	cfg := s.cfg
	return daytona.New(daytona.Config{DataPlane: dp, APIKeys: cfg.APIKeys, MaxTimeout: cfg.MaxTimeout,
		MaxOutput: cfg.MaxExecOutputBytes, Logger: s.log}, s.m)
}
