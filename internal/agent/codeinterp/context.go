package codeinterp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Info describes a context (E2B's shape).
type Info struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	// Default marks a language's default context (made on first use by
	// an execution that names no context), which Daytona's listing leaves
	// out.
	Default bool `json:"default,omitempty"`
	// Created is when the context was made (RFC 3339, UTC).
	Created string `json:"created,omitempty"`
}

// ExecRequest is one execution.
type ExecRequest struct {
	Code string
	// Env is set for this execution only.
	Env map[string]string
	// Timeout bounds the execution; 0 means the registry's default.
	Timeout time.Duration
	// MaxOutputBytes caps stdout and stderr each; 0 means the default.
	MaxOutputBytes int64
}

// Context is one interpreter with persistent state. Its process is
// started lazily and replaced when it dies.
type Context struct {
	info  Info
	user  string
	lang  *language
	reg   *Registry
	order int // creation order, for listing

	// turn admits one execution or restart at a time. A channel rather
	// than a mutex: waiting for it must end when the caller goes away,
	// and a crashed execution hands it to the goroutine restarting the
	// interpreter.
	turn chan struct{}

	mu      sync.Mutex
	k       *kernel
	applied map[string]string // default environment the interpreter knows
	deleted bool
}

// Info returns the context's description.
func (c *Context) Info() Info { return c.info }

func (c *Context) acquire(ctx context.Context) error {
	select {
	case c.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Context) release() { <-c.turn }

// Why the agent interrupted an execution.
const (
	interruptNone int32 = iota
	interruptTimeout
	interruptCancelled
)

// Execute runs req and streams its events to emit, ending with
// end_of_execution. Problems after the call was accepted (the interpreter
// cannot start, the context was deleted) are reported in the stream as
// error events. It returns an error, having emitted nothing, only when
// ctx ends while the execution still waits for its turn.
//
// When the timeout passes or ctx ends, the interpreter is interrupted
// (SIGINT); if the execution does not end within the registry's grace,
// the interpreter is killed and restarted, and the state is lost.
func (c *Context) Execute(ctx context.Context, req ExecRequest, emit Emit) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := c.reg.cfg
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = cfg.DefaultTimeout
	}
	limit := req.MaxOutputBytes
	if limit <= 0 {
		limit = cfg.MaxOutputBytes
	}
	// A client that stops reading makes emit fail: treat it as gone.
	s := newSink(emit, limit, cfg.MaxResultBytes, cancel)
	if err := c.acquire(ctx); err != nil {
		return err
	}
	handedOff := false
	defer func() {
		if !handedOff {
			c.release()
		}
	}()

	k, note, err := c.kernelForRun(ctx)
	if err != nil {
		name := "ContextStartFailed"
		if KindOf(err) == KindNotFound {
			name = "ContextDeleted"
		}
		s.finish(ErrorEvent(name, err.Error(), ""), EndEvent())
		return nil
	}
	if note != "" {
		s.notice(note)
	}

	var why atomic.Int32
	stop := make(chan struct{})
	go c.watch(ctx, k, timeout, &why, stop)
	out := k.run(cell{code: req.Code, env: req.Env, setenv: c.envChanges(), maxResult: cfg.MaxResultBytes}, s)
	close(stop)

	final := c.finalError(k, out, why.Load(), timeout)
	if out.died {
		handedOff = c.recover(k)
	}
	if final != nil {
		s.finish(*final, EndEvent())
	} else {
		s.finish(EndEvent())
	}
	return nil
}

// watch interrupts the execution when its timeout passes or its caller
// goes away, and kills the interpreter if that does not end it within the
// grace period.
func (c *Context) watch(ctx context.Context, k *kernel, timeout time.Duration, why *atomic.Int32, stop <-chan struct{}) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	reason := killTimeout
	select {
	case <-stop:
		return
	case <-t.C:
		why.Store(interruptTimeout)
	case <-ctx.Done():
		why.Store(interruptCancelled)
		reason = killCancelled
	}
	k.log.Debug("interrupting execution", "reason", reason)
	k.interrupt()
	g := time.NewTimer(c.reg.cfg.Grace)
	defer g.Stop()
	select {
	case <-stop:
	case <-g.C:
		k.log.Info("execution ignored the interrupt; killing the interpreter", "grace", c.reg.cfg.Grace)
		k.kill(reason)
	}
}

// finalError decides the error an execution ends with.
func (c *Context) finalError(k *kernel, out cellOutcome, why int32, timeout time.Duration) *Event {
	grace := c.reg.cfg.Grace
	lang := c.info.Language
	var ev Event
	switch {
	case out.died:
		switch k.reason() {
		case killTimeout:
			ev = ErrorEvent("TimeoutError", fmt.Sprintf("Execution timed out after %v and did not stop within %v of an interrupt: the %s interpreter was restarted and the context's state was lost.", timeout, grace, lang), "")
		case killCancelled:
			ev = ErrorEvent("ExecutionInterrupted", fmt.Sprintf("The client went away and the execution did not stop within %v of an interrupt: the %s interpreter was restarted and the context's state was lost.", grace, lang), "")
		case killRestart:
			ev = ErrorEvent("ContextRestarting", "The context was restarted during the execution; its state was lost.", "")
		case killDeleted, killClose:
			ev = ErrorEvent("ContextDeleted", "The context was deleted during the execution.", "")
		default:
			if why == interruptTimeout {
				ev = ErrorEvent("TimeoutError", fmt.Sprintf("Execution timed out after %v and the %s interpreter exited when interrupted (%s): it was restarted and the context's state was lost.", timeout, lang, k.proc.Status()), "")
			} else {
				ev = ErrorEvent("ContextRestarting", crashMessage(lang, k), "")
			}
		}
	case why == interruptTimeout:
		tb := ""
		if out.err != nil {
			tb = *out.err.Traceback
		}
		ev = ErrorEvent("TimeoutError", fmt.Sprintf("Execution timed out after %v and was interrupted; the context's state was kept.", timeout), tb)
	default:
		return out.err
	}
	return &ev
}

// crashMessage explains an interpreter that died on its own.
func crashMessage(lang string, k *kernel) string {
	status := k.proc.Status()
	if k.reason() == killProtocol {
		status = "it broke the agent's protocol and was killed"
	}
	hint := ""
	if strings.Contains(status, "signal: killed") {
		hint = " It was killed with SIGKILL, most likely by the out-of-memory killer."
	}
	return fmt.Sprintf("The %s interpreter exited unexpectedly during the execution (%s): the context was restarted and its state was lost.%s",
		lang, status, hint)
}

// recover replaces a dead interpreter after a failed execution. Unless the
// context is being restarted or deleted (those paths start or drop the
// interpreter themselves), a new interpreter is started in the
// background, holding the turn so the next execution waits for it; recover
// then reports that the turn was handed off.
func (c *Context) recover(k *kernel) bool {
	c.mu.Lock()
	mine := c.k == k
	if mine {
		c.k = nil
	}
	deleted := c.deleted
	c.mu.Unlock()
	k.teardown()
	if !mine || deleted || k.reason() == killRestart {
		return false
	}
	c.reg.log.Info("interpreter ended during an execution; restarting it", "context", c.info.ID,
		"language", c.info.Language, "status", k.proc.Status(), "killed_because", k.reason())
	go func() {
		defer c.release()
		ctx, cancel := context.WithTimeout(context.Background(), c.reg.cfg.StartTimeout)
		defer cancel()
		if err := c.startLocked(ctx); err != nil {
			// The next execution tries again and reports the error.
			c.reg.log.Warn("restart interpreter after a crash", "context", c.info.ID, "err", err)
		}
	}()
	return true
}

// kernelForRun returns the running interpreter, starting one if there is
// none. An interpreter that died while idle is replaced, and note tells
// the execution so. The caller holds the turn.
func (c *Context) kernelForRun(ctx context.Context) (k *kernel, note string, err error) {
	c.mu.Lock()
	k, deleted := c.k, c.deleted
	c.mu.Unlock()
	if deleted {
		return nil, "", errorf(KindNotFound, "context %s was deleted", c.info.ID)
	}
	if k != nil && !k.alive() {
		note = fmt.Sprintf("[agentbox] the %s interpreter had exited since the last execution (%s); it was restarted and the context's state was lost\n",
			c.info.Language, k.proc.Status())
		c.mu.Lock()
		if c.k == k {
			c.k = nil
		}
		c.mu.Unlock()
		k.teardown()
		k = nil
	}
	if k == nil {
		if err := c.startLocked(ctx); err != nil {
			return nil, "", err
		}
		c.mu.Lock()
		k = c.k
		c.mu.Unlock()
	}
	return k, note, nil
}

// startLocked starts a new interpreter; the caller holds the turn.
func (c *Context) startLocked(ctx context.Context) error {
	env, err := c.reg.cfg.Host.Env(c.user)
	if err != nil {
		return err
	}
	k, err := startKernel(ctx, c.reg, c.lang, c.user, c.info.Cwd, env)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		go k.teardown()
		return errorf(KindNotFound, "context %s was deleted", c.info.ID)
	}
	c.k, c.applied = k, env
	return nil
}

// envChanges returns how the default environment changed since the
// interpreter last heard of it (POST /init after the context started),
// and records the current one as known.
func (c *Context) envChanges() map[string]*string {
	env, err := c.reg.cfg.Host.Env(c.user)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var diff map[string]*string
	set := func(k string, v *string) {
		if diff == nil {
			diff = map[string]*string{}
		}
		diff[k] = v
	}
	for k, v := range env {
		if old, ok := c.applied[k]; !ok || old != v {
			set(k, &v)
		}
	}
	for k := range c.applied {
		if _, ok := env[k]; !ok {
			set(k, nil)
		}
	}
	c.applied = env
	return diff
}

// Restart replaces the interpreter with a fresh one: all state is lost.
// A running execution is ended (its interpreter is killed at once) and
// reports that the context was restarted.
func (c *Context) Restart(ctx context.Context) error {
	c.mu.Lock()
	k, deleted := c.k, c.deleted
	c.mu.Unlock()
	if deleted {
		return errorf(KindNotFound, "context %s not found", c.info.ID)
	}
	if k != nil {
		k.kill(killRestart)
	}
	if err := c.acquire(ctx); err != nil {
		return err
	}
	defer c.release()
	c.mu.Lock()
	k, c.k = c.k, nil
	c.mu.Unlock()
	if k != nil {
		k.kill(killRestart)
		k.teardown()
	}
	return c.startLocked(ctx)
}

// close kills the interpreter for good (delete, shutdown).
func (c *Context) close(reason string) {
	c.mu.Lock()
	k := c.k
	c.k, c.deleted = nil, true
	c.mu.Unlock()
	if k != nil {
		k.kill(reason)
		go k.teardown()
	}
}
