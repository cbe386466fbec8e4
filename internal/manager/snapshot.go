package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// errStoreStopped ends the backend's writing when the store stops reading.
var errStoreStopped = errors.New("the template store stopped reading the snapshot")

// maxTemplateRef bounds a template name given to Snapshot (the store
// validates its form).
const maxTemplateRef = 255

// Snapshot turns owner's sandbox's current root filesystem into template
// name ("NAME[:TAG]"): the template it runs plus one layer, its changes.
// Only image templates have such a layer; host is refused (and dir by the
// native backend: backend.CapabilitiesFor). The
// sandbox keeps running (the backend freezes it while it reads).
func (m *Manager) Snapshot(ctx context.Context, owner string, id sandbox.ID, name string) (template.Info, error) {
	e, err := m.entryFor(owner, id)
	if err != nil {
		return template.Info{}, err
	}
	if err := checkTemplateRef(name); err != nil {
		return template.Info{}, err
	}
	if !m.isTemplateAdmin(owner) {
		// A tenant's snapshot holds its files and must not replace a
		// template others start from: it goes to the tenant's own namespace.
		if template.IsPrivate(name) && !template.VisibleTo(name, owner) {
			return template.Info{}, invalid("name", "template %q is in another user's private namespace", name)
		}
		name = template.PrivateName(owner, name)
	}
	sn, ok := m.backend.(backend.Snapshotter)
	if !ok || m.cfg.Committer == nil {
		return template.Info{}, sandbox.Errorf(sandbox.ClassUnavailable, "this server cannot snapshot sandboxes (the %s backend or the template store lacks it)", m.backend.Name())
	}
	info, err := m.backend.Inspect(ctx, id)
	if err != nil {
		return template.Info{}, err
	}
	base := info.Spec.Template
	if base.Kind == sandbox.TemplateHost {
		return template.Info{}, sandbox.Errorf(sandbox.ClassInvalid, "sandbox %s runs the host template, whose root filesystem is the host's /usr: only sandboxes of image and dir templates can be snapshotted", id)
	}
	if info.State != sandbox.StateRunning && info.State != sandbox.StatePaused { // a paused one is read as it is
		return template.Info{}, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s; start it to snapshot it", id, info.State)
	}
	// A snapshot reads and stores a whole layer: one of its owner's heavy
	// requests (MAX_REQUESTS_PER_USER), so one user cannot run many at once.
	release, err := m.Admit(owner, 0)
	if err != nil {
		return template.Info{}, err
	}
	defer release()
	// Refused before the sandbox is frozen when the owner's quota or the
	// store's filesystem has no room left; the same limits stop the layer
	// while it streams.
	charge, err := m.startSnapshotCharge(owner, name)
	if err != nil {
		return template.Info{}, err
	}
	defer charge.end()
	if err := m.cfg.Committer.CheckFree(m.cfg.DiskReserve); err != nil {
		return template.Info{}, err
	}
	opts := template.CommitOptions{
		// One copy of the layer: the unpacked tree sandboxes mount. An
		// export writes the blob again from it.
		NoBlob:  true,
		Reserve: m.cfg.DiskReserve,
	}
	if charge.enforce {
		opts.Charge = charge.add
	}

	// The backend writes the layer while the store reads it: no copy of
	// the whole layer in memory or on disk here.
	pr, pw := io.Pipe()
	diffDone := make(chan error, 1)
	go func() {
		err := sn.SnapshotDiff(ctx, id, pw)
		pw.CloseWithError(err)
		diffDone <- err
	}()
	ti, err := m.cfg.Committer.CommitWith(ctx, name, base, pr, base.Config, "snapshot of "+string(id), opts)
	// Unblock the writer if the store stopped reading early.
	pr.CloseWithError(errStoreStopped)
	diffErr := <-diffDone
	if errors.Is(diffErr, errStoreStopped) {
		diffErr = nil // a consequence of the store's answer, reported below
	}
	switch {
	case diffErr != nil && sandbox.ClassOf(diffErr) != sandbox.ClassInternal:
		return template.Info{}, diffErr // the backend's own verdict (host, stopped...)
	case diffErr != nil:
		// Even if the store finished, a layer the backend did not finish
		// must not become a template (the pipe carries the error, so a
		// store fails it too).
		return template.Info{}, fmt.Errorf("snapshot sandbox %s: %w", id, diffErr)
	case err != nil:
		return template.Info{}, fmt.Errorf("store snapshot of sandbox %s: %w", id, err)
	}
	m.mu.Lock()
	e.logs.add("info", "snapshot taken", map[string]any{"template": ti.Name + ":" + ti.Tag})
	m.mu.Unlock()
	m.log.Info("sandbox snapshot", "sandbox", id, "template", ti.Name+":"+ti.Tag, "digest", ti.Digest)
	m.emit(m.snapshot(e), events.Snapshotted, api(owner), nil, map[string]any{"template": ti.Name + ":" + ti.Tag})
	return ti, nil
}

// checkTemplateRef refuses names no store could hold; the store checks
// the exact form.
func checkTemplateRef(name string) error {
	if name == "" {
		return invalid("name", "a template name is required (NAME[:TAG])")
	}
	if len(name) > maxTemplateRef {
		return invalid("name", "template name is longer than %d bytes", maxTemplateRef)
	}
	if strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return invalid("name", "template name %.40q contains spaces or control characters", name)
	}
	return nil
}
