package agentscope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// knownTypes are agentscope's sandbox type names that map onto templates
// here (through SANDBOX_TEMPLATES); a known type without a template is
// refused with a clear message.
var knownTypes = []string{"base", "filesystem", "browser", "gui"}

// errLimit means the instance limit was reached: the routes answer null.
var errLimit = errors.New("sandbox instance limit reached")

// createOpts describes a sandbox to create.
type createOpts struct {
	typ string
	env map[string]string
	// sess, when set, is the held session the sandbox is bound to
	// (withSession).
	sess *manager.Session
	// mountDir is the host directory of a gone sandbox's workspace to
	// continue in (a restore): a directory of DEFAULT_MOUNT_DIR the
	// manager kept.
	mountDir string
	storage  string // storage_path to restore the workspace from
	fromPool bool
}

// createSandbox creates a sandbox for owner and publishes its record: the
// workspace is restored from storage when there is a copy, and made a git
// repository. errLimit when a limit is reached. What is agentscope's own
// (that it made the sandbox, its type name, its storage_path) goes in its
// record, not in the manager's request.
func (s *Server) createSandbox(ctx context.Context, owner string, o createOpts) (*record, error) {
	if o.typ == "" {
		o.typ = s.cfg.DefaultTypes[0]
	}
	if _, ok := s.m.Templates()[o.typ]; !ok {
		if contains(knownTypes, o.typ) {
			return nil, fmt.Errorf("sandbox type '%s' is not available on this server (no template in SANDBOX_TEMPLATES)", o.typ)
		}
		return nil, fmt.Errorf("'%s' is not a valid SandboxType", o.typ)
	}
	req := manager.CreateRequest{Type: o.typ, Timeout: s.cfg.SandboxTimeout, Env: o.env, NoPool: !o.fromPool}
	if o.mountDir != "" {
		req.Workspace = filepath.Base(o.mountDir)
	}
	var rec *store.Record
	var err error
	if o.sess != nil {
		rec, err = o.sess.Create(ctx, req)
	} else {
		rec, err = s.m.Create(ctx, owner, req)
	}
	if err != nil {
		if sandbox.ClassOf(err) == sandbox.ClassQuota {
			s.log.Warn("agentscope create refused by a limit", "owner", owner, "err", err)
			return nil, errLimit
		}
		return nil, desktopTypeHint(o.typ, err)
	}
	now := time.Now()
	r := &record{
		Name: s.cfg.Prefix + string(rec.ID), ID: rec.ID, Owner: owner, Type: o.typ,
		Session: rec.SessionKey, Token: rec.AccessToken, MountDir: rec.WorkspaceDir, Storage: o.storage,
		CreatedAt: now, LastActive: now, UpdatedAt: now, State: stateWarm, Ours: true,
	}
	if r.Session != "" {
		r.State = stateRunning
	}
	if r.Storage == "" {
		r.Storage = s.defaultStoragePath(owner, rec.ID)
	}
	if err := s.prepareWorkspace(ctx, r); err != nil {
		_ = s.m.Delete(context.WithoutCancel(ctx), owner, rec.ID)
		return nil, err
	}
	if err := s.reg.put(ctx, r); err != nil {
		_ = s.m.Delete(context.WithoutCancel(ctx), owner, rec.ID)
		return nil, fmt.Errorf("record sandbox %s: %w", r.Name, err)
	}
	s.prestartBrowser(r)
	s.log.Info("agentscope sandbox created", "sandbox", r.Name, "type", r.Type, "session", r.Session, "owner", owner)
	return r, nil
}

// prepareWorkspace restores a stored workspace copy, then makes /workspace
// a git repository with a first commit (the watcher diffs against HEAD).
func (s *Server) prepareWorkspace(ctx context.Context, r *record) error {
	if r.Storage != "" {
		if err := s.restoreWorkspace(ctx, r); err != nil {
			return fmt.Errorf("restore workspace from %s: %w", r.Storage, err)
		}
	}
	if _, err := s.git(ctx, r, gitInitScript); err != nil {
		return fmt.Errorf("initialise the workspace repository: %w", err)
	}
	return nil
}

// apiCreate is POST /create.
func (s *Server) apiCreate(ctx context.Context, c *call) (any, error) {
	typ, err := c.str("sandbox_type")
	if err != nil {
		return nil, err
	}
	env, ok, err := envArg(c)
	if err != nil || !ok {
		return nil, err
	}
	session, err := sessionArg(c)
	if err != nil {
		return nil, err
	}
	if md, _ := c.str("mount_dir"); md != "" {
		// A caller-chosen host directory would let any API user mount the
		// host: like agentscope without ALLOW_MOUNT_DIR, use the default.
		s.log.Warn("agentscope create: mount_dir ignored (not allowed); using DEFAULT_MOUNT_DIR", "mount_dir", md)
	}
	storage, err := c.str("storage_path")
	if err != nil {
		return nil, err
	}
	if storage, err = s.resolveStoragePath(c.owner, storage); err != nil {
		return nil, err
	}
	var r *record
	err = s.withSession(ctx, c.owner, session, func(ctx context.Context, sess *manager.Session) error {
		r, err = s.createSandbox(ctx, c.owner, createOpts{typ: typ, env: env, sess: sess, storage: storage})
		return err
	})
	if errors.Is(err, errLimit) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r.Name, nil
}

// apiCreateFromPool is POST /create_from_pool: a warm sandbox of the type
// when the pool has one, else a fresh one.
func (s *Server) apiCreateFromPool(ctx context.Context, c *call) (any, error) {
	typ, err := c.str("sandbox_type")
	if err != nil {
		return nil, err
	}
	session, err := sessionArg(c)
	if err != nil {
		return nil, err
	}
	var r *record
	err = s.withSession(ctx, c.owner, session, func(ctx context.Context, sess *manager.Session) error {
		r, err = s.createSandbox(ctx, c.owner, createOpts{typ: typ, sess: sess, fromPool: true})
		return err
	})
	if errors.Is(err, errLimit) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r.Name, nil
}

// sessionArg is meta.session_ctx_id.
func sessionArg(c *call) (string, error) {
	meta, err := c.object("meta")
	if err != nil {
		return "", err
	}
	var key string
	switch v := meta["session_ctx_id"].(type) {
	case nil:
		return "", nil
	case string:
		key = v
	default:
		b, _ := json.Marshal(v)
		key = string(b)
	}
	if len(key) > manager.MaxSessionKey {
		return "", fmt.Errorf("session_ctx_id is longer than %d characters", manager.MaxSessionKey)
	}
	return key, nil
}

// envArg is the environment argument. ok=false (with no error) means a
// variable was null, for which agentscope answers null.
func envArg(c *call) (map[string]string, bool, error) {
	raw, err := c.object("environment")
	if err != nil || raw == nil {
		return nil, true, err
	}
	env := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v := v.(type) {
		case nil:
			return nil, false, nil
		case string:
			env[k] = v
		case bool:
			env[k] = map[bool]string{true: "True", false: "False"}[v]
		default:
			b, _ := json.Marshal(v)
			env[k] = string(b)
		}
	}
	return env, true, nil
}
