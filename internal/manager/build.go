package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// BuildSandbox is a sandbox running one build step, handed to the
// function RunBuildSandbox calls.
type BuildSandbox struct {
	Info  sandbox.Info
	Agent *agentclient.Client
	// Snapshotter writes the layer of what the step changed.
	Snapshotter backend.Snapshotter
}

// RunBuildSandbox creates a sandbox from spec for a template build step,
// calls fn with it, and destroys it, whatever happens (ctx ending
// included). Build sandboxes belong to the operator, not to a tenant: no
// tenant lists or reaches them, they count against the server's sandbox
// cap (MAX_INSTANCES) but no user's, they hold their template's layers
// like any sandbox (so a template delete waits), and they have no record
// in the sandbox store, so a daemon that dies during a build destroys
// them at its next start (Recover drops sandboxes without a record).
func (m *Manager) RunBuildSandbox(ctx context.Context, spec sandbox.Spec, fn func(ctx context.Context, sb BuildSandbox) error) error {
	sn, ok := m.backend.(backend.Snapshotter)
	if !ok {
		return sandbox.Errorf(sandbox.ClassUnavailable, "the %s backend cannot turn a sandbox's changes into a layer: no Dockerfile builds on this server", m.backend.Name())
	}
	if spec.Network.Mode == sandbox.NetworkEgress && !m.EgressAvailable(spec.Template.Kind) {
		return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox networking is not available on this server: a RUN step needs --network=none here")
	}
	spec.ID = sandbox.NewID()
	spec.AccessToken = newToken()
	spec.Resources = spec.Resources.WithDefaults(m.cfg.DefaultResources)
	spec.Labels = map[string]string{"owner": "", "purpose": "build"}
	if err := m.reserve(spec.ID, ""); err != nil {
		return err
	}
	m.mu.Lock()
	// The placeholder stays for the whole step: invisible to every owner
	// (creating), counted by the cap and by TemplateUsers.
	m.entries[spec.ID].rec = &store.Record{ID: spec.ID, Template: spec.Template.Ref, TemplateDigest: spec.Template.Digest}
	m.mu.Unlock()
	defer func() {
		m.unreserve(spec.ID)
		m.metrics.setLive(m.countLive())
	}()
	m.metrics.setLive(m.countLive())

	start := time.Now()
	info, err := m.backend.Create(ctx, spec)
	m.metrics.phase("backend_create", time.Since(start))
	if err != nil {
		return fmt.Errorf("create build sandbox: %w", err)
	}
	client := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address, Pid: info.Agent.Pid}, spec.AccessToken)
	defer func() {
		client.Close()
		// A cancelled build must not leave its sandbox: destroy without ctx.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := m.backend.Destroy(dctx, spec.ID); derr != nil {
			m.log.Error("destroy build sandbox", "sandbox", spec.ID, "err", derr)
		}
	}()
	err = fn(ctx, BuildSandbox{Info: info, Agent: client, Snapshotter: sn})
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}
