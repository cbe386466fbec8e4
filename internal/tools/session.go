package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// MetaSession is the metadata key that marks the sandboxes a session
// created (its value is the session's tag).
const MetaSession = "agentbox.tools.session"

// refreshEvery spaces the refreshes that keep a session's sandboxes alive
// while the session uses them.
const refreshEvery = time.Minute

// SessionOptions configure a Session.
type SessionOptions struct {
	// Owner keys the kit's per-sandbox state (terminals, code contexts):
	// the authenticated user, so callers never share it.
	Owner string
	// Sandbox binds the session to one sandbox (BoundMode); empty means
	// SessionMode.
	Sandbox string
	// Create is the request for the session's own sandbox when a tool
	// first needs it (Metadata gets MetaSession added).
	Create client.CreateRequest
	Logger *slog.Logger
}

// Session is one caller's use of the kit. Sandboxes it creates are
// destroyed by Close.
type Session struct {
	kit *Kit
	c   *client.Client
	// confined is c confined to the file tools' roots (fs).
	confined *client.Client
	opts     SessionOptions
	tag      string
	log      *slog.Logger
	mode     Mode
	bound    string

	createMu sync.Mutex // one lazy creation at a time
	mu       sync.Mutex
	def      string               // the session's default sandbox
	owned    map[string]time.Time // sandboxes this session created -> last refresh
	seen     map[string]bool      // explicit sandbox ids found to exist
	closed   bool
}

// NewSession returns a session calling the server through c.
func (k *Kit) NewSession(c *client.Client, opts SessionOptions) *Session {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Session{kit: k, c: c, opts: opts, tag: randomTag(), log: opts.Logger, owned: map[string]time.Time{}, seen: map[string]bool{}}
	if opts.Sandbox != "" {
		s.mode, s.bound = BoundMode, opts.Sandbox
	}
	return s
}

// Mode returns the session's mode.
func (s *Session) Mode() Mode { return s.mode }

// Tag is the value of MetaSession on the sandboxes this session created.
func (s *Session) Tag() string { return s.tag }

// Client returns the session's API client.
func (s *Session) Client() *client.Client { return s.c }

func randomTag() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Call runs tool name with args (a JSON object). The error is
// ErrUnknownTool or nil: every other failure is a Result with IsError.
func (s *Session) Call(ctx context.Context, name string, args json.RawMessage) (*Result, error) {
	t := s.kit.byName[name]
	if t == nil || (s.mode == BoundMode && t.Global) {
		return nil, fmt.Errorf("%w %q", ErrUnknownTool, name)
	}
	withID := s.mode == SessionMode && !t.Global
	args, err := t.validate(args, withID)
	if err != nil {
		return asResult(err, ""), nil
	}
	sb := ""
	if !t.Global {
		var a struct {
			SandboxID string `json:"sandbox_id"`
		}
		_ = json.Unmarshal(args, &a)
		sb, err = s.sandbox(ctx, a.SandboxID)
		if err != nil {
			return asResult(err, a.SandboxID), nil
		}
	}
	res, err := t.run(ctx, s, sb, args)
	if err != nil {
		if sb != "" && s.isDefault(sb) && client.IsNotFound(err) && s.gone(ctx, sb) {
			// The session's sandbox is gone (its timeout, a kill from
			// elsewhere): the next call starts a fresh one.
			s.forget(sb)
			return asResult(fail("this session's sandbox %s no longer exists (it timed out or was killed); everything in it is lost. Call the tool again to get a fresh sandbox.", sb), sb), nil
		}
		return asResult(err, sb), nil
	}
	return res, nil
}

// gone reports whether sandbox id no longer exists.
func (s *Session) gone(ctx context.Context, id string) bool {
	_, err := s.c.Get(ctx, id)
	return client.IsNotFound(err)
}

func (s *Session) isDefault(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.def == id
}

// forget drops id from the session (it no longer exists).
func (s *Session) forget(id string) {
	s.mu.Lock()
	if s.def == id {
		s.def = ""
	}
	delete(s.owned, id)
	delete(s.seen, id)
	s.mu.Unlock()
	s.kit.dropState(s.opts.Owner, id)
}

// sandbox returns the sandbox a call acts on: the bound one, the
// explicit one, or the session's own (created now if needed).
func (s *Session) sandbox(ctx context.Context, explicit string) (string, error) {
	if s.mode == BoundMode {
		if explicit != "" && explicit != s.bound {
			return "", fail("this endpoint is bound to sandbox %s; sandbox_id %s is not accepted here", s.bound, explicit)
		}
		return s.bound, nil
	}
	if explicit != "" {
		// Check the id once, so a wrong one is reported as a missing
		// sandbox rather than as a missing file later on.
		s.mu.Lock()
		_, mine := s.owned[explicit]
		known := s.seen[explicit] || mine
		s.mu.Unlock()
		if !known {
			if _, err := s.c.Get(ctx, explicit); err != nil {
				if client.IsNotFound(err) {
					return "", fail("sandbox %s not found: it may have timed out or been killed, or belong to someone else. Call sandbox_list to see your sandboxes, or omit sandbox_id to use this session's sandbox.", explicit)
				}
				return "", err
			}
			s.mu.Lock()
			s.seen[explicit] = true
			s.mu.Unlock()
		}
		s.keepAlive(ctx, explicit)
		return explicit, nil
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	s.mu.Lock()
	id, closed := s.def, s.closed
	s.mu.Unlock()
	if closed {
		return "", fail("this session has ended")
	}
	if id != "" {
		s.keepAlive(ctx, id)
		return id, nil
	}
	sb, err := s.create(ctx, s.opts.Create)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.def = sb.ID
	s.mu.Unlock()
	return sb.ID, nil
}

// create makes a sandbox owned by the session.
func (s *Session) create(ctx context.Context, req client.CreateRequest) (*client.Sandbox, error) {
	md := map[string]string{}
	for k, v := range req.Metadata {
		md[k] = v
	}
	md[MetaSession] = s.tag
	req.Metadata = md
	sb, err := s.c.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.owned[sb.ID] = time.Now()
	}
	s.mu.Unlock()
	if closed {
		// The session ended while the sandbox was being made.
		s.destroy(sb.ID)
		return nil, fail("this session has ended")
	}
	s.log.Info("tools session sandbox created", "sandbox", sb.ID, "session", s.tag)
	return sb, nil
}

// keepAlive refreshes a sandbox the session created, at most once a
// refreshEvery, so a session in use does not lose it to its timeout.
func (s *Session) keepAlive(ctx context.Context, id string) {
	every := refreshEvery
	if t := s.opts.Create.Timeout; t > 0 && t/3 < every {
		every = t / 3
	}
	s.mu.Lock()
	last, ok := s.owned[id]
	due := ok && time.Since(last) > every
	if due {
		s.owned[id] = time.Now()
	}
	s.mu.Unlock()
	if due {
		// At least the life the sandbox was created with (zero: the
		// server's default); Refresh never shortens it.
		if _, err := s.c.Refresh(ctx, id, s.opts.Create.Timeout); err != nil {
			s.log.Debug("refresh session sandbox", "sandbox", id, "err", err)
		}
	}
}

// Close ends the session: every sandbox it created is destroyed.
func (s *Session) Close() {
	s.createMu.Lock()
	s.mu.Lock()
	s.closed = true
	owned := s.owned
	s.owned = map[string]time.Time{}
	s.def = ""
	s.mu.Unlock()
	s.createMu.Unlock()
	for id := range owned {
		s.destroy(id)
	}
}

func (s *Session) destroy(id string) {
	s.kit.dropState(s.opts.Owner, id)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.c.Delete(ctx, id); err != nil && !client.IsNotFound(err) {
		s.log.Warn("tools session: destroy sandbox", "sandbox", id, "err", err)
		return
	}
	s.log.Info("tools session sandbox destroyed", "sandbox", id, "session", s.tag)
}

// stateKey identifies per-sandbox state: owner and sandbox.
type stateKey struct{ owner, sandbox string }

// sandboxState is what the kit keeps about one caller's sandbox between
// calls.
type sandboxState struct {
	mu        sync.Mutex
	used      time.Time // last state() of it
	terminals map[string]*terminal
	nextTerm  int
	contexts  map[string]string // language + "\x00" + name -> context id
	env       map[string]string // persisted variables (nil: not loaded)
}

// stateIdle is how long the state of a sandbox nobody uses is kept once
// its terminals have ended (the sandbox may be gone: nothing tells the
// kit, which only sees the API).
const stateIdle = time.Hour

func (k *Kit) state(owner, sb string) *sandboxState {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := stateKey{owner, sb}
	now := time.Now()
	st := k.states[key]
	if st == nil {
		k.sweepLocked(now)
		st = &sandboxState{terminals: map[string]*terminal{}, contexts: map[string]string{}}
		k.states[key] = st
	}
	st.mu.Lock()
	st.used = now
	st.mu.Unlock()
	return st
}

// sweepLocked forgets the states unused for stateIdle whose terminals
// have all ended. k.mu is held.
func (k *Kit) sweepLocked(now time.Time) {
	for key, st := range k.states {
		st.mu.Lock()
		idle := now.Sub(st.used) > stateIdle
		live := false
		for _, t := range st.terminals {
			t.mu.Lock()
			live = live || !t.done
			t.mu.Unlock()
		}
		st.mu.Unlock()
		if idle && !live {
			delete(k.states, key)
		}
	}
}

// dropState forgets a sandbox's state, closing its terminals.
func (k *Kit) dropState(owner, sb string) {
	k.mu.Lock()
	key := stateKey{owner, sb}
	st := k.states[key]
	delete(k.states, key)
	k.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		terms := st.terminals
		st.terminals = map[string]*terminal{}
		st.mu.Unlock()
		for _, t := range terms {
			t.close()
		}
	}
}

// Close closes every terminal the kit holds.
func (k *Kit) Close() {
	k.mu.Lock()
	keys := make([]stateKey, 0, len(k.states))
	for key := range k.states {
		keys = append(keys, key)
	}
	k.mu.Unlock()
	for _, key := range keys {
		k.dropState(key.owner, key.sandbox)
	}
}
