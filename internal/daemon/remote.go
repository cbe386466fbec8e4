package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/multi"
	remotedaytona "github.com/agentbox/agentbox/internal/backend/remote/daytona"
	remotee2b "github.com/agentbox/agentbox/internal/backend/remote/e2b"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// withRemote puts the remote provider's backend beside b when
// SANDBOX_PROVIDER names one: e2b:NAME (daytona:SNAPSHOT) templates run
// at the provider, everything else where it ran before.
func withRemote(cfg *config.Config, dataDir string, b backend.Backend, log *slog.Logger) (backend.Backend, error) {
	p := cfg.ProviderSettings
	var rb backend.Backend
	var err error
	switch p.SandboxProvider {
	case "e2b":
		rb, err = remotee2b.New(remotee2b.Config{Provider: "e2b", APIURL: p.ProviderAPI(), SandboxURL: string(p.E2BSandboxURL),
			Domain: p.E2BDomain, APIKey: p.E2BAPIKey, StateDir: filepath.Join(dataDir, "remote", "e2b"),
			Node: nodeID(cfg, dataDir), Lease: p.ProviderLease, Logger: log})
		if err == nil {
			log.Info("remote provider enabled", "provider", "e2b", "api", p.ProviderAPI())
		}
	case "daytona":
		rb, err = remotedaytona.New(remotedaytona.Config{Provider: "daytona", APIURL: p.DaytonaAPI(), APIKey: p.DaytonaAPIKey,
			Target: p.DaytonaTarget, StateDir: filepath.Join(dataDir, "remote", "daytona"),
			Node: nodeID(cfg, dataDir), Lease: p.ProviderLease, Logger: log})
		if err == nil {
			log.Info("remote provider enabled", "provider", "daytona", "api", p.DaytonaAPI())
		}
	default:
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote provider (SANDBOX_PROVIDER=%s): %w", p.SandboxProvider, err)
	}
	if m, ok := b.(*multi.Backend); ok {
		return multi.New(m.Backends()[0], append(m.Backends()[1:], rb)...), nil
	}
	return multi.New(b, rb), nil
}

// remoteResolver resolves "e2b:NAME" (or "daytona:SNAPSHOT", the
// provider's kind) to a template the provider runs (NAME is the
// provider's; the provider says whether it has it); other names go to
// next, and so do all names without a provider.
type remoteResolver struct {
	provider string // SANDBOX_PROVIDER: the kind resolved here; "" or local: none
	next     resolver
}

func (r remoteResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	if r.provider != remotee2b.TemplateKind && r.provider != remotedaytona.TemplateKind {
		return r.next.Resolve(ctx, ref)
	}
	name, ok := strings.CutPrefix(ref, r.provider+":")
	if !ok {
		return r.next.Resolve(ctx, ref)
	}
	if name == "" || len(name) > 256 || strings.ContainsAny(name, " \t\r\n/?#%\x00") {
		return sandbox.Template{}, sandbox.Errorf(sandbox.ClassInvalid, "template %q: not a provider template name", ref)
	}
	return sandbox.Template{Ref: ref, Kind: r.provider}, nil
}

// routeResolver sends the names PROVIDER_ROUTES routes to the provider
// always to their remote template; other names go to next.
type routeResolver struct {
	routes map[string]string
	next   resolver
}

func (r routeResolver) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	if to, ok := r.routes[ref]; ok {
		return r.next.Resolve(ctx, to)
	}
	return r.next.Resolve(ctx, ref)
}

// remoteKind is the template kind of the remote provider SANDBOX_PROVIDER
// names ("e2b", "daytona"), "" without one or with a backend of a test's.
func remoteKind(cfg *config.Config, own bool) string {
	if !own || cfg.SandboxProvider == "local" {
		return ""
	}
	return string(cfg.SandboxProvider)
}
