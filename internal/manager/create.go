package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/pool"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tracing"
	"github.com/agentbox/agentbox/internal/volume"
)

// CreateRequest is what a caller asks for. Zero fields take the server's
// defaults.
type CreateRequest struct {
	// Template is "host" or a template name the operator registered
	// (SANDBOX_TEMPLATES: "base", or a name mapped to "dir:/path"); Type is a
	// sandbox type name. Template wins when both are set. A "dir:" template
	// is never taken from a request.
	Template string
	Type     string
	Timeout  time.Duration
	Env      map[string]string
	Metadata map[string]string
	// Resources override the defaults field by field.
	Resources sandbox.Resources
	Network   sandbox.Network
	// Isolation is the isolation level asked for ("": the template's or
	// the server's default; see isolationFor).
	Isolation sandbox.Isolation
	// Workspace continues in a kept workspace: the name of a directory
	// under DEFAULT_MOUNT_DIR, where each sandbox gets one named after it
	// that stays after the sandbox is gone, for a sandbox that takes over
	// from a gone one (a restored session). Only front-ends set it; it is
	// never taken from a request body.
	Workspace string
	// Extra is opaque front-end data stored with the record.
	Extra map[string]string
	// AutoPause pauses the sandbox at its end time instead of destroying
	// it (see Pause).
	AutoPause bool
	// NoPool forces a cold create.
	NoPool bool
	// NoService creates the sandbox without running its template's
	// service (CMD, start_cmd, warm code context); implies NoPool.
	NoService bool
	// Volumes are the caller's volumes to mount (volumes.go); implies
	// NoPool.
	Volumes []sandbox.VolumeMount

	// session binds the sandbox to a session key: set only by a held
	// Session (sessions.go), so every binding is serialised with the
	// session's other changes.
	session string
	// workspaceDir is Workspace resolved by validate.
	workspaceDir string
	// forkOf makes the sandbox's disk a live copy of this sandbox's
	// (fork.go).
	forkOf sandbox.ID
}

const (
	maxMetadataEntries = 64
	maxMapKeyLen       = 256
	maxMapValueLen     = 4096
	maxEnvEntries      = 256
	maxEnvValueLen     = 128 << 10
	// maxEnvMetaBytes caps env and metadata together (keys and values):
	// they are kept with the sandbox's state, on a small tmpfs every
	// tenant shares, so one sandbox may take only a small part of it.
	maxEnvMetaBytes = 256 << 10
)

// resolveTemplate maps a request to a resolved template and a type name.
func (m *Manager) resolveTemplate(ctx context.Context, owner string, req CreateRequest) (sandbox.Template, string, error) {
	name := req.Template
	if name == "" {
		name = req.Type
	}
	if name == "" {
		name = "base"
		if len(m.cfg.PoolTypes) > 0 {
			name = m.cfg.PoolTypes[0]
		}
	}
	if req.Template != "" && strings.HasPrefix(name, "dir:") {
		// A caller-chosen host directory as a root filesystem would let any
		// tenant mount the host (another tenant's disk, /sys, /run).
		return sandbox.Template{}, "", invalid("template", "template %q refused: a host directory becomes a template only by the operator's configuration (SANDBOX_TEMPLATES); ask for a registered template by name (%s)", name, m.templateNames())
	}
	t, err := m.cfg.Resolver.Resolve(ctx, name)
	if err == nil && !m.templateVisible(name, owner) {
		// Another user's snapshot: as unknown as a name never stored.
		err = sandbox.Errorf(sandbox.ClassNotFound, "unknown template %q", name)
	}
	var notReady *sandbox.TemplateNotReady
	switch {
	case errors.As(err, &notReady):
		// A built-in template still building or not built: its own
		// answer (state, how long, the command that builds it).
		return sandbox.Template{}, "", err
	case sandbox.ClassOf(err) == sandbox.ClassNotFound && req.Template == "":
		return sandbox.Template{}, "", &sandbox.Error{Class: sandbox.ClassInvalid, Msg: fmt.Sprintf("unknown sandbox type %q", name), Err: fieldErr("type")}
	case sandbox.ClassOf(err) == sandbox.ClassNotFound:
		return sandbox.Template{}, "", invalid("template", "unknown template %q (want one of %s)", name, m.templateNames())
	case err != nil:
		return sandbox.Template{}, "", fmt.Errorf("resolve template %q: %w", name, err)
	}
	if t.Ref == "" {
		t.Ref = name
	}
	typ := req.Type
	if _, ok := m.cfg.Templates[name]; ok {
		typ = name
	}
	return t, typ, nil
}

// templateNames lists the template names a caller may ask for; those that
// cannot be created yet (a built-in template still building) are listed
// apart, each with why.
func (m *Manager) templateNames() string {
	names := []string{"host"}
	for k := range m.cfg.Templates {
		if k != "host" {
			names = append(names, k)
		}
	}
	sort.Strings(names[1:])
	if m.cfg.TemplateNote == nil {
		return strings.Join(names, ", ")
	}
	var ready, later []string
	for _, n := range names {
		if note := m.cfg.TemplateNote(n); note != "" {
			later = append(later, fmt.Sprintf("%s (%s)", n, note))
		} else {
			ready = append(ready, n)
		}
	}
	out := strings.Join(ready, ", ")
	if len(later) > 0 {
		out += "; not ready yet: " + strings.Join(later, ", ")
	}
	return out
}

// FieldError names the request field an invalid_argument error is about.
type FieldError = sandbox.FieldError

func fieldErr(field string) error { return &FieldError{Field: field} }

func invalid(field, format string, args ...any) error { return sandbox.Invalid(field, format, args...) }

func (m *Manager) validate(req *CreateRequest) error {
	if req.Timeout < 0 {
		return invalid("timeout", "timeout must be positive")
	}
	if req.Timeout == 0 {
		req.Timeout = m.cfg.DefaultTimeout
	}
	if req.Timeout > m.cfg.MaxTimeout {
		return invalid("timeout", "timeout %s is over the server's maximum %s", req.Timeout, m.cfg.MaxTimeout)
	}
	if err := checkMap("metadata", req.Metadata, maxMetadataEntries, maxMapValueLen); err != nil {
		return err
	}
	if err := checkMap("env", req.Env, maxEnvEntries, maxEnvValueLen); err != nil {
		return err
	}
	if n := mapBytes(req.Env) + mapBytes(req.Metadata); n > maxEnvMetaBytes {
		return invalid("env", "env and metadata take %d KiB together, at most %d KiB allowed", (n+1023)>>10, maxEnvMetaBytes>>10)
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.HasPrefix(k, "AGENTBOX_") {
			return invalid("env", "invalid environment variable name %q", k)
		}
	}
	r, max := req.Resources, m.cfg.MaxResources
	switch {
	case r.MemoryBytes < 0 || (max.MemoryBytes > 0 && r.MemoryBytes > max.MemoryBytes):
		return invalid("resources.memory", "memory must be at most %d MiB", max.MemoryBytes>>20)
	case r.CPUs < 0 || (max.CPUs > 0 && r.CPUs > max.CPUs):
		return invalid("resources.cpus", "cpus must be at most %g", max.CPUs)
	case r.PIDs < 0 || (max.PIDs > 0 && r.PIDs > max.PIDs):
		return invalid("resources.pids", "pids must be at most %d", max.PIDs)
	case r.DiskBytes < 0 || (max.DiskBytes > 0 && r.DiskBytes > max.DiskBytes):
		return invalid("resources.disk", "disk must be at most %d MiB", max.DiskBytes>>20)
	}
	if req.Workspace != "" {
		dir, err := m.keptWorkspace(req.Workspace)
		if err != nil {
			return err
		}
		req.workspaceDir = dir
	}
	if len(req.Volumes) > 0 {
		if m.cfg.Volumes == nil {
			return invalid("volumes", "this server has no volumes")
		}
		if err := volume.CheckMounts(req.Volumes); err != nil {
			return err
		}
	}
	return m.validateNetwork(&req.Network)
}

// keptWorkspace is the directory of a kept workspace (CreateRequest.
// Workspace): a directory of DEFAULT_MOUNT_DIR named like a sandbox, never
// a link, so no name leads anywhere else on the host.
func (m *Manager) keptWorkspace(name string) (string, error) {
	if m.cfg.DefaultMountDir == "" {
		return "", invalid("workspace", "workspace %q: no workspace is kept on this server (DEFAULT_MOUNT_DIR is not set)", name)
	}
	if sandbox.ID(name).Validate() != nil {
		return "", invalid("workspace", "invalid workspace name %q", name)
	}
	dir := filepath.Join(m.cfg.DefaultMountDir, name)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return "", invalid("workspace", "no kept workspace %q in DEFAULT_MOUNT_DIR", name)
	}
	return dir, nil
}

// mapBytes is the size of m's keys and values.
func mapBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

func checkMap(field string, m map[string]string, maxEntries, maxValue int) error {
	if len(m) > maxEntries {
		return invalid(field, "%s has %d entries, at most %d allowed", field, len(m), maxEntries)
	}
	for k, v := range m {
		if len(k) > maxMapKeyLen || len(v) > maxValue || strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			return invalid(field, "%s entry %.40q is too long or contains NUL", field, k)
		}
	}
	return nil
}

// Create creates a sandbox for owner: from a warm pool when one matches,
// else cold. The returned record is a snapshot.
func (m *Manager) Create(ctx context.Context, owner string, req CreateRequest) (*store.Record, error) {
	ctx, span := startCreateSpan(ctx, owner, req)
	rec, err := m.create(ctx, owner, req)
	endCreateSpan(span, rec, err)
	return rec, err
}

func (m *Manager) create(ctx context.Context, owner string, req CreateRequest) (*store.Record, error) {
	start := time.Now()
	if err := m.validate(&req); err != nil {
		return nil, err
	}
	if err := m.checkRules(ctx, owner, req.Network); err != nil {
		return nil, err
	}
	template, typ, err := m.resolveTemplate(ctx, owner, req)
	if err != nil {
		return nil, err
	}
	poolIsolation := m.templateIsolation(template.Ref, "")
	if req.Isolation, err = m.isolationFor(owner, template.Ref, typ, req.Isolation); err != nil {
		return nil, err
	}
	if err := m.stateReady(ctx); err != nil {
		return nil, err
	}
	name := req.Template
	if name == "" {
		name = req.Type
	}
	if name == "" {
		name = "base"
		if len(m.cfg.PoolTypes) > 0 {
			name = m.cfg.PoolTypes[0]
		}
	}
	placeCtx, placeSpan := tracing.Tracer().Start(ctx, "sandbox.place")
	template, release, err := m.place(placeCtx, owner, name, template, req)
	endSpan(placeSpan, err)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := m.checkEgress(template.Kind, req.Network); err != nil {
		return nil, err
	}
	// Pooled sandboxes boot at their template's level, and only here.
	if m.poolEligible(req) && req.Isolation == poolIsolation && m.providerOf(template.Kind) == "" {
		if cp := m.claimPoolFor(template.Ref); cp != nil {
			poolCtx, poolSpan := tracing.Tracer().Start(ctx, "pool.claim")
			rec, ok, err := m.createClaimed(poolCtx, cp, owner, typ, template, req)
			endPoolSpan(poolSpan, ok, err)
			if ok || err != nil {
				if err == nil {
					m.metrics.created("pool", time.Since(start))
					m.emit(rec, events.Created, api(owner), nil, map[string]any{"from_pool": true})
				}
				return rec, err
			}
		} else if p := m.poolFor(template.Ref); p != nil {
			poolCtx, poolSpan := tracing.Tracer().Start(ctx, "pool.take")
			rec, ok, err := m.takeFromPool(poolCtx, p, owner, typ, template, req)
			endPoolSpan(poolSpan, ok, err)
			if ok || err != nil {
				if err == nil {
					m.metrics.created("pool", time.Since(start))
					m.emit(rec, events.Created, api(owner), nil, map[string]any{"from_pool": true})
				}
				return rec, err
			}
		}
		m.metrics.poolMiss(template.Ref)
	}
	rec, err := m.createCold(ctx, owner, template, typ, req, "")
	if err != nil {
		m.metrics.createFailed()
		return nil, err
	}
	source := "cold"
	if rec.Provider != "" {
		source = "remote"
	}
	m.metrics.created(source, time.Since(start))
	m.emit(rec, events.Created, api(owner), nil, nil)
	return rec, nil
}

// poolEligible reports whether a pooled sandbox can serve req: pooled
// sandboxes boot with the default resources, network mode and workspace;
// env, metadata, timeout and the egress policy are applied at hand-over.
func (m *Manager) poolEligible(req CreateRequest) bool {
	return !req.NoPool && !req.NoService && len(req.Volumes) == 0 && req.Resources == (sandbox.Resources{}) &&
		req.Network.Mode == m.cfg.DefaultNetworkMode &&
		req.Workspace == "" && m.cfg.DefaultMountDir == ""
}

// reserve inserts a placeholder entry counted against the limits, or fails
// with a quota error. Pool fills (owner "") only count against the global cap.
func (m *Manager) reserve(id sandbox.ID, owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg.MaxInstances > 0 && len(m.entries) >= m.cfg.MaxInstances {
		return sandbox.Errorf(sandbox.ClassQuota, "the server runs its maximum of %d sandboxes", m.cfg.MaxInstances)
	}
	if owner != "" && m.cfg.MaxPerUser > 0 {
		n := 0
		for _, e := range m.entries {
			if e.rec.Owner == owner && e.rec.Pool == "" {
				n++
			}
		}
		if n >= m.cfg.MaxPerUser {
			return sandbox.Errorf(sandbox.ClassQuota, "you have %d sandboxes, the maximum per user", n)
		}
	}
	m.entries[id] = &entry{rec: &store.Record{ID: id, Owner: owner}, creating: true, logs: newEventLog()}
	return nil
}

func (m *Manager) unreserve(id sandbox.ID) {
	m.mu.Lock()
	if e, ok := m.entries[id]; ok && e.creating {
		delete(m.entries, id)
	}
	m.mu.Unlock()
}

// createCold boots a new sandbox. poolKey is set for pool fills.
func (m *Manager) createCold(ctx context.Context, owner string, template sandbox.Template, typ string, req CreateRequest, poolKey string) (*store.Record, error) {
	return m.createNew(ctx, owner, template, typ, req, poolKey, nil)
}

// createNew makes a new sandbox: booted by the backend, or handed out of
// the backend's own warm pool cp (nil: cold).
func (m *Manager) createNew(ctx context.Context, owner string, template sandbox.Template, typ string, req CreateRequest, poolKey string, cp *claimPool) (*store.Record, error) {
	id := sandbox.NewID()
	if err := m.reserve(id, owner); err != nil {
		return nil, err
	}
	if err := m.reserveShared(ctx, id, owner); err != nil {
		m.unreserve(id)
		return nil, err
	}
	now := time.Now().UTC()
	rec := &store.Record{
		ID: id, Owner: owner, Template: template.Ref, TemplateDigest: template.Digest, Type: typ, State: sandbox.StateRunning,
		CreatedAt: now, EndAt: now.Add(req.Timeout), LastActive: now,
		Metadata: req.Metadata, Env: req.Env, Network: req.Network,
		AccessToken: newToken(), SessionKey: req.session, Pool: poolKey, Extra: req.Extra, AutoPause: req.AutoPause,
		Isolation: req.Isolation,
		Volumes:   req.Volumes,
	}
	if poolKey != "" {
		rec.EndAt = time.Time{} // pooled sandboxes wait without a deadline
	}
	spec := sandbox.Spec{
		ID: id, Template: template, Env: req.Env, AccessToken: rec.AccessToken, Network: req.Network,
		Resources: req.Resources.WithDefaults(templateDefaults(template, m.cfg.DefaultResources, m.cfg.MaxResources)),
		Mounts:    m.cfg.ReadonlyMounts, WorkspaceDir: req.workspaceDir,
		Labels:    map[string]string{"owner": owner},
		Isolation: req.Isolation,
		// An image's root is writable (on the sandbox's disk), so that
		// package managers work as they do in a container.
		WritableRoot: template.Kind == sandbox.TemplateImage,
	}
	if spec.WorkspaceDir == "" && m.cfg.DefaultMountDir != "" {
		dir := filepath.Join(m.cfg.DefaultMountDir, string(id))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			m.unreserveShared(ctx, id)
			return nil, fmt.Errorf("create workspace dir: %w", err)
		}
		// The sandbox user owns its workspace, as on the sandbox's own disk
		// (the native backend then moves it to the sandbox's own host ids).
		_ = os.Chown(dir, 1000, 1000)
		spec.WorkspaceDir = dir
	}
	if len(req.Volumes) > 0 {
		vms, err := m.cfg.Volumes.Attach(ctx, owner, id, req.Volumes)
		if err != nil {
			m.unreserveShared(ctx, id)
			return nil, err
		}
		spec.Mounts = append(append([]sandbox.Mount(nil), spec.Mounts...), vms...)
	}
	rec.WorkspaceDir = spec.WorkspaceDir
	rec.Node = m.cfg.NodeID
	rec.Provider = m.providerOf(template.Kind)
	rec.Resources = spec.Resources
	svc, err := serviceFor(template, req)
	if err != nil {
		m.unreserveShared(ctx, id)
		return nil, err
	}
	spec.Service = svc

	bootStart := time.Now()
	var info sandbox.Info
	bootCtx, bootSpan := tracing.Tracer().Start(ctx, "backend.create", trace.WithAttributes(attribute.String("agentbox.sandbox", string(id))))
	if cp != nil {
		rec.FromPool = true
		bootSpan.SetName("backend.claim")
		info, err = cp.backend.CreateFromPool(bootCtx, cp.name, spec)
		m.metrics.phase("backend_claim", time.Since(bootStart))
	} else if req.forkOf != "" {
		bootSpan.SetName("backend.fork")
		info, err = m.backend.(backend.Forker).Fork(bootCtx, req.forkOf, spec)
		m.metrics.phase("backend_fork", time.Since(bootStart))
	} else {
		info, err = m.backend.Create(bootCtx, spec)
		m.metrics.phase("backend_create", time.Since(bootStart))
	}
	endSpan(bootSpan, err)
	if err != nil {
		m.unreserveShared(ctx, id)
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if spec.Service != nil {
		svcCtx, svcSpan := tracing.Tracer().Start(ctx, "sandbox.wait_service")
		err = m.waitService(svcCtx, id, info, rec.AccessToken)
		endSpan(svcSpan, err)
		if err != nil {
			// Nothing stays behind a create that failed.
			_ = m.backend.Destroy(context.WithoutCancel(ctx), id)
			m.unreserveShared(ctx, id)
			return nil, err
		}
	}
	if d := info.Spec.Resources.DiskBytes; d > 0 {
		rec.Resources.DiskBytes = d // the backend may round the size up
	}
	if rec.Provider != "" && info.Spec.Resources != (sandbox.Resources{}) {
		rec.Resources = info.Spec.Resources // what the provider gave it
	}
	complete := func() {
		m.mu.Lock()
		e := m.entries[id]
		e.rec, e.agent, e.creating, e.lastActive = rec, info.Agent, false, time.Now()
		if poolKey == "" {
			m.armTimerLocked(id, e)
			msg := "created"
			if cp != nil {
				msg = "handed over from the warm pool"
			}
			e.logs.add("info", msg, map[string]any{"template": template.Ref})
		} else {
			e.logs.add("info", "created for the warm pool", map[string]any{"template": template.Ref})
		}
		m.mu.Unlock()
	}
	if poolKey != "" {
		// A shared store's pool hands the sandbox out as soon as its record
		// is stored, before this fill returns: the entry must be whole by
		// then, or the taker personalises a placeholder that this fill then
		// overwrites with the pooled record. No user sees a pooled entry.
		complete()
	}
	_, putSpan := tracing.Tracer().Start(ctx, "store.put")
	err = m.store.Put(context.WithoutCancel(ctx), rec)
	endSpan(putSpan, err)
	if err != nil {
		_ = m.backend.Destroy(context.WithoutCancel(ctx), id)
		m.mu.Lock()
		if e := m.entries[id]; e != nil {
			e.creating = true // not stored, so nobody took it: unreserve drops it
		}
		m.mu.Unlock()
		m.unreserveShared(ctx, id)
		return nil, err
	}
	if poolKey == "" {
		complete()
	}
	m.metrics.setLive(m.countLive())
	return rec.Clone(), nil
}

// takeFromPool hands a pooled sandbox to owner and personalises it. ok is
// false when the pool had nothing usable.
func (m *Manager) takeFromPool(ctx context.Context, p *pool.Pool, owner, typ string, t sandbox.Template, req CreateRequest) (*store.Record, bool, error) {
	a := m.atomicStore()
	for attempt := 0; attempt < 3; attempt++ {
		var (
			id     sandbox.ID
			ok     bool
			shared *store.Record
		)
		if a != nil {
			var err error
			if id, shared, ok, err = m.takeShared(ctx, a, p, owner); err != nil {
				return nil, true, err
			}
		} else {
			id, ok = p.Take()
		}
		if !ok {
			return nil, false, nil
		}
		rec, err := m.handOver(ctx, id, owner, typ, t, req, shared != nil)
		if err == nil {
			m.metrics.poolHit(p.Key())
			return rec, true, nil
		}
		if sandbox.ClassOf(err) == sandbox.ClassQuota {
			return nil, true, err
		}
		if sandbox.ClassOf(err) == sandbox.ClassUnavailable && m.stateReady(ctx) != nil {
			// The state store went away mid-hand-over: the sandbox is not
			// broken, keep it.
			if shared != nil {
				// Taken in the store already: the next start of the daemon
				// finds an ownerless handed-out record; drop it then.
				m.log.Warn("state store away after a pool take; the sandbox waits for the store", "sandbox", id)
			}
			return nil, true, err
		}
		// A pooled sandbox that cannot be personalised is broken: drop it and
		// try the next one.
		m.log.Warn("discarding broken pooled sandbox", "sandbox", id, "err", err)
		_ = m.destroy(context.WithoutCancel(ctx), id, "broken in pool")
		if shared != nil && !m.Hosts(id) {
			// The store's pool named a sandbox this daemon does not run:
			// its record, handed to owner by the take, must not stay.
			_ = m.store.Delete(context.WithoutCancel(ctx), id)
		}
	}
	return nil, false, nil
}

// handOver personalises pooled sandbox id for owner. taken says the shared
// store handed it over already (within the owner's limit, counted across
// replicas).
func (m *Manager) handOver(ctx context.Context, id sandbox.ID, owner, typ string, t sandbox.Template, req CreateRequest, taken bool) (*store.Record, error) {
	m.mu.Lock()
	e, ok := m.entries[id]
	if !ok || e.destroying {
		m.mu.Unlock()
		return nil, sandbox.ErrNotFound(id)
	}
	if e.rec.TemplateDigest != t.Digest {
		// The name now stands for other content (a new pull or build):
		// the pooled sandbox is stale, takeFromPool drops it.
		m.mu.Unlock()
		return nil, fmt.Errorf("template %s changed since the sandbox was pooled", t.Ref)
	}
	if owner != "" && m.cfg.MaxPerUser > 0 && !taken {
		n := 0
		for _, o := range m.entries {
			if o.rec.Owner == owner && o.rec.Pool == "" && !o.creating {
				n++
			}
		}
		if n >= m.cfg.MaxPerUser {
			m.mu.Unlock()
			// Back into the pool: it is still good.
			if p := m.poolFor(e.rec.Pool); p != nil {
				p.Add(id)
			}
			return nil, sandbox.Errorf(sandbox.ClassQuota, "you have %d sandboxes, the maximum per user", n)
		}
	}
	client := m.clientLocked(e)
	m.mu.Unlock()

	if len(req.Env) > 0 {
		if err := client.SetEnv(ctx, req.Env); err != nil {
			return nil, fmt.Errorf("apply env to pooled sandbox: %w", err)
		}
	}
	if len(req.Network.AllowOut)+len(req.Network.DenyOut)+len(req.Network.Rules) > 0 {
		nu, ok := m.backend.(backend.NetworkUpdater)
		if !ok {
			return nil, sandbox.Errorf(sandbox.ClassUnavailable, "backend cannot set network policies")
		}
		if err := nu.UpdateNetwork(ctx, id, req.Network); err != nil {
			return nil, fmt.Errorf("apply network policy to pooled sandbox: %w", err)
		}
	}
	now := time.Now().UTC()
	m.mu.Lock()
	rec := e.rec.Clone()
	rec.Owner, rec.Type, rec.Pool, rec.FromPool = owner, typ, "", true
	rec.CreatedAt, rec.EndAt, rec.LastActive = now, now.Add(req.Timeout), now
	rec.Metadata, rec.Env, rec.SessionKey, rec.Extra = req.Metadata, req.Env, req.session, req.Extra
	rec.AutoPause = req.AutoPause
	rec.Network = req.Network
	e.rec, e.lastActive = rec, time.Now()
	m.armTimerLocked(id, e)
	e.logs.add("info", "handed over from the warm pool", nil)
	m.mu.Unlock()
	if err := m.store.Put(context.WithoutCancel(ctx), rec); err != nil {
		return nil, err
	}
	return rec.Clone(), nil
}
