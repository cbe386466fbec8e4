package manager

import (
	"context"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// emit records a lifecycle event of rec's sandbox. Pooled sandboxes not
// handed out have no owner to tell and are skipped.
func (m *Manager) emit(rec *store.Record, typ events.Type, cause events.Cause, exit *events.Exit, data map[string]any) {
	if m.cfg.Events == nil || rec == nil || rec.Pool != "" || rec.Owner == "" {
		return
	}
	if rec.Provider != "" {
		// Where it runs, on every event of a remote sandbox.
		d := make(map[string]any, len(data)+1)
		for k, v := range data {
			d[k] = v
		}
		d["provider"] = rec.Provider
		data = d
	}
	m.cfg.Events.Emit(events.Event{Type: typ, SandboxID: string(rec.ID), Owner: rec.Owner, Template: rec.Template,
		Cause: cause, Exit: exit, Data: data})
}

func api(by string) events.Cause { return events.Cause{Kind: events.CauseAPI, By: by} }

// emitOther records an event of owner's that is about no sandbox (a
// volume, a template build), caused by owner's call.
func (m *Manager) emitOther(typ events.Type, owner string, data map[string]any) {
	if m == nil || m.cfg.Events == nil { // nil: a front end's unit test without a manager
		return
	}
	m.cfg.Events.Emit(events.Event{Type: typ, Owner: owner, Cause: api(owner), Data: data})
}

// RecordTemplateBuild records the end of a Dockerfile build by user (an
// operator, or a tenant building a private template): template_built
// with its tags, digest, steps and cached steps, or template_build_failed
// with the error.
func (m *Manager) RecordTemplateBuild(user string, tags []string, digest string, steps, cached int, err error) {
	data := map[string]any{"tags": tags}
	if err != nil {
		data["error"] = err.Error()
		m.emitOther(events.TemplateBuildFailed, user, data)
		return
	}
	data["digest"], data["steps"], data["cached"] = digest, steps, cached
	m.emitOther(events.TemplateBuilt, user, data)
}

// RecordTemplateDeleted records user's delete of template ref (a snapshot
// of theirs, or a shared template an operator removed).
func (m *Manager) RecordTemplateDeleted(user, ref string) {
	m.emitOther(events.TemplateDeleted, user, map[string]any{"template": ref})
}

// destroyEvent turns a destroy reason (the metrics label) into the event's
// type and cause. Every reason destroy is called with is listed.
func destroyEvent(reason, owner string) (events.Type, events.Cause) {
	switch reason {
	case "deleted":
		return events.Killed, api(owner)
	case "session released":
		return events.Killed, events.Cause{Kind: events.CauseSession, By: owner}
	case "heartbeat timeout":
		return events.Expired, events.Cause{Kind: events.CauseIdle}
	case "timeout":
		return events.Expired, events.Cause{Kind: events.CauseTimeout}
	case "paused ttl":
		return events.Expired, events.Cause{Kind: events.CausePausedTTL}
	case "server shutdown":
		return events.Killed, events.Cause{Kind: events.CauseDaemonShutdown}
	case "agent exited":
		return events.Killed, events.Cause{Kind: events.CauseAgentExit}
	}
	return events.Killed, events.Cause{Kind: events.CauseInternal, Detail: reason}
}

// agentExit is how the agent of id ended, from the backend when it tells.
func (m *Manager) agentExit(ctx context.Context, id sandbox.ID, reason string) (events.Cause, *events.Exit) {
	cause := events.Cause{Kind: events.CauseAgentExit, Detail: reason}
	er, ok := m.backend.(backend.ExitReporter)
	if !ok {
		return cause, nil
	}
	x, ok := er.LastExit(ctx, id)
	if !ok {
		return cause, nil
	}
	if x.OOMKilled {
		cause.Kind = events.CauseOOMKill
	}
	return cause, &events.Exit{Code: x.Code, Signal: x.Signal, OOMKilled: x.OOMKilled}
}

// LimitHit records that a limit killed a process of sandbox id (the data
// plane saw the OOM killer or the pids limit act during a command).
func (m *Manager) LimitHit(id sandbox.ID, oom bool, exitCode int, cmd []string) {
	m.mu.Lock()
	e, ok := m.entries[id]
	var rec *store.Record
	if ok {
		rec = e.rec.Clone()
	}
	m.mu.Unlock()
	cause := events.Cause{Kind: events.CausePidsLimit}
	if oom {
		cause.Kind = events.CauseOOMKill
	}
	m.emit(rec, events.ProcessKilled, cause, &events.Exit{Code: exitCode, OOMKilled: oom}, map[string]any{"cmd": cmd})
}
