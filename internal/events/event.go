// Package events records what happened to sandboxes: every state change
// with its cause (an API call and by whom, a timeout, idle reaping, the OOM
// killer, a daemon shutdown, a lost node) and the exit status where one
// exists. Events are kept in the store's EventLog, so every replica that
// shares the store reads the same events, numbered in one sequence that a
// reader resumes from without loss or repetition.
package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// Type is what happened.
type Type string

// The event types.
const (
	Created   Type = "created"   // handed to its owner (cold or from a pool)
	Started   Type = "started"   // a stopped sandbox booted again
	Paused    Type = "paused"    // frozen
	Resumed   Type = "resumed"   // thawed
	Stopped   Type = "stopped"   // its processes ended, its files kept
	Killed    Type = "killed"    // destroyed before its end time
	Expired   Type = "expired"   // destroyed at its end time or idle
	Lost      Type = "lost"      // gone without the daemon destroying it
	Recovered Type = "recovered" // reattached by a restarted daemon
	Updated   Type = "updated"   // its end time was set
	// Snapshotted: its filesystem became a template.
	Snapshotted Type = "snapshotted"
	// ProcessKilled: a limit killed a process in it (the OOM killer, the
	// pids limit) while the sandbox lives on.
	ProcessKilled Type = "process_killed"
	// Forked: the sandbox was copied into new ones (data: forks, their
	// ids); each fork has its own created event (data: fork_of).
	Forked Type = "forked"

	// Events of other resources than sandboxes: no sandbox_id.

	VolumeCreated Type = "volume_created" // data: volume, kind, size_bytes
	VolumeDeleted Type = "volume_deleted" // data: volume, force
	// TemplateBuilt and TemplateBuildFailed end a Dockerfile build (data:
	// tags, digest, steps, cached; error for a failed one).
	TemplateBuilt       Type = "template_built"
	TemplateBuildFailed Type = "template_build_failed"
	// TemplateDeleted: a template or snapshot was deleted (data: template).
	TemplateDeleted Type = "template_deleted"
)

// Types are every type, in documentation order.
var Types = []Type{Created, Started, Paused, Resumed, Stopped, Killed, Expired, Lost, Recovered, Updated, Snapshotted, ProcessKilled, Forked,
	VolumeCreated, VolumeDeleted, TemplateBuilt, TemplateBuildFailed, TemplateDeleted}

// OfSandbox reports whether events of type t are about one sandbox (and
// name it), not about a volume or a template.
func (t Type) OfSandbox() bool {
	switch t {
	case VolumeCreated, VolumeDeleted, TemplateBuilt, TemplateBuildFailed, TemplateDeleted:
		return false
	}
	return true
}

// Valid reports whether t is a known type.
func (t Type) Valid() bool {
	for _, k := range Types {
		if k == t {
			return true
		}
	}
	return false
}

// CauseKind is why it happened.
type CauseKind string

// The causes.
const (
	CauseAPI            CauseKind = "api"              // a caller asked (Cause.By says who)
	CauseTimeout        CauseKind = "timeout"          // its end time came
	CauseIdle           CauseKind = "idle"             // its session was idle for HEARTBEAT_TIMEOUT
	CausePausedTTL      CauseKind = "paused_ttl"       // it stayed paused for PAUSED_TTL
	CauseSession        CauseKind = "session_released" // its session was released (Cause.By)
	CauseOOMKill        CauseKind = "oom_kill"         // the OOM killer, at its memory limit
	CausePidsLimit      CauseKind = "pids_limit"       // a fork refused by its pids limit
	CauseAgentExit      CauseKind = "agent_exit"       // its agent (PID 1) died on its own
	CauseDaemonShutdown CauseKind = "daemon_shutdown"  // the daemon stopped with AUTO_CLEANUP
	CauseDaemonRestart  CauseKind = "daemon_restart"   // the daemon restarted and looked again
	CauseNodeLost       CauseKind = "node_lost"        // the replica that ran it is gone
	CauseInternal       CauseKind = "internal"         // the daemon's own housekeeping
)

// Cause says why an event happened.
type Cause struct {
	Kind CauseKind `json:"kind"`
	// By is the user whose call it was (api, session_released).
	By string `json:"by,omitempty"`
	// Detail is free text for people (the backend's exit reason...).
	Detail string `json:"detail,omitempty"`
}

// Exit is how a process ended (the sandbox's agent, or a killed process).
type Exit struct {
	// Code is the exit code (128+signal for a signal, as shells say).
	Code int `json:"code"`
	// Signal names the signal that killed it, if one did.
	Signal string `json:"signal,omitempty"`
	// OOMKilled: the OOM killer killed it.
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// Event is one recorded happening.
type Event struct {
	// ID is the event's number: assigned by the store when recorded,
	// unique and growing across replicas sharing it.
	ID        uint64    `json:"id"`
	Time      time.Time `json:"time"`
	Type      Type      `json:"type"`
	SandboxID string    `json:"sandbox_id"`
	// Owner is the tenant whose sandbox it is.
	Owner    string `json:"owner"`
	Template string `json:"template,omitempty"`
	// Node is the replica that recorded it.
	Node  string `json:"node,omitempty"`
	Cause Cause  `json:"cause"`
	Exit  *Exit  `json:"exit,omitempty"`
	// Data is more about the event, by type: end_at (updated), template
	// (snapshotted), from_pool and fork_of (created), cmd
	// (process_killed), forks (forked), volume (volume_*), tags (template_*).
	Data map[string]any `json:"data,omitempty"`
}

// encode is how an event is stored (without its ID, which the store gives).
func (e *Event) encode() ([]byte, error) {
	c := *e
	c.ID = 0
	return json.Marshal(&c)
}

func decode(seq uint64, data []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return Event{}, fmt.Errorf("decode event %d: %w", seq, err)
	}
	e.ID = seq
	return e, nil
}
