package daytona

import (
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// sessionRegistry holds the toolbox sessions of every sandbox.
type sessionRegistry struct {
	mu sync.Mutex
}

func newSessionRegistry() *sessionRegistry { return &sessionRegistry{} }

func (g *sessionRegistry) dropSandbox(sandbox.ID) {}

func (g *sessionRegistry) closeAll() {}

func (s *Server) registerSessions(t func(string, toolbox)) {}
