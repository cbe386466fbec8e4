package sandbox

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Labels an image (a Dockerfile's LABEL) sets to describe what it runs.
// Explicit ImageConfig fields win over labels.
const (
	// LabelStartCmd is a shell command run as the sandbox's service.
	LabelStartCmd = "agentbox.start_cmd"
	// LabelReadyCmd is a shell command whose exit 0 means ready.
	LabelReadyCmd = "agentbox.ready_cmd"
	// LabelReadyPort is a TCP port whose accepting connections means ready.
	LabelReadyPort = "agentbox.ready_port"
	// LabelService "off" keeps an image's CMD from running as a service.
	LabelService = "agentbox.service"
	// LabelCodeContext starts the default code context of this language
	// at boot (code-interpreter templates).
	LabelCodeContext = "agentbox.code.context"
	// LabelCodeWarmup is code run in that context before it is ready.
	LabelCodeWarmup = "agentbox.code.warmup"
)

// Service is what a sandbox runs after boot, supervised by its agent, and
// how the agent knows it is ready. It is resolved from the template when
// the sandbox is created and kept in its spec, so every boot of the
// sandbox (start after stop, a restarted daemon) runs the same service.
type Service struct {
	// Cmd is the service's argv; empty runs no process (a template that
	// only warms a code context).
	Cmd []string `json:"cmd,omitempty"`
	// Ready is the readiness check; nil means ready once started.
	Ready *ReadyCheck `json:"ready,omitempty"`
	// CodeContext is the language of the default code context started
	// (and Warmup run in it) before the sandbox is ready.
	CodeContext string `json:"code_context,omitempty"`
	Warmup      string `json:"warmup,omitempty"`
	// MaxRestarts bounds consecutive restarts of a service that keeps
	// exiting; then it is failed. Zero means DefaultMaxRestarts.
	MaxRestarts int `json:"max_restarts,omitempty"`
}

// ReadyCheck is one of: a command (a HEALTHCHECK or a ready_cmd), a TCP port.
type ReadyCheck struct {
	Cmd         []string      `json:"cmd,omitempty"`
	Port        int           `json:"port,omitempty"`
	Interval    time.Duration `json:"interval,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	StartPeriod time.Duration `json:"start_period,omitempty"`
	// Retries consecutive failures after StartPeriod fail the service;
	// zero: only the start timeout ends the wait.
	Retries int `json:"retries,omitempty"`
}

// DefaultMaxRestarts is Service.MaxRestarts when unset.
const DefaultMaxRestarts = 10

// ServiceOf resolves what a template runs; nil when it runs nothing.
//
// The rules (docs/services.md): an explicit start command (StartCmd, the
// agentbox.start_cmd label) always runs. The image's ENTRYPOINT+CMD
// (combined as Docker does) runs only when the image says it is a service
// — a HEALTHCHECK, a ready command or port, or an EXPOSEd TCP port — so
// the `bash` or `python3` CMD of a toolbox image does not become a
// service that exits at once. Readiness: the HEALTHCHECK, else the ready
// command, else the ready port, else the first EXPOSEd TCP port; with
// none the service is ready once started.
func ServiceOf(c ImageConfig) (*Service, error) {
	l := c.Labels
	svc := &Service{CodeContext: strings.TrimSpace(l[LabelCodeContext]), Warmup: l[LabelCodeWarmup]}
	ready, err := readyOf(c)
	if err != nil {
		return nil, err
	}
	svc.Ready = ready
	switch {
	case len(c.StartCmd) > 0:
		svc.Cmd = c.StartCmd
	case strings.TrimSpace(l[LabelStartCmd]) != "":
		svc.Cmd = []string{"/bin/sh", "-c", l[LabelStartCmd]}
	case strings.EqualFold(l[LabelService], "off"):
	case ready != nil || len(c.Ports) > 0:
		svc.Cmd = append(append([]string(nil), c.Entrypoint...), c.Cmd...)
	}
	if svc.Ready == nil && len(svc.Cmd) > 0 {
		if p := firstTCPPort(c.Ports); p > 0 {
			svc.Ready = &ReadyCheck{Port: p}
		}
	}
	if svc.Warmup != "" && svc.CodeContext == "" {
		return nil, fmt.Errorf("label %s needs %s", LabelCodeWarmup, LabelCodeContext)
	}
	if len(svc.Cmd) == 0 && svc.CodeContext == "" {
		return nil, nil
	}
	return svc, nil
}

func readyOf(c ImageConfig) (*ReadyCheck, error) {
	if h := c.Healthcheck; h != nil && len(h.Test) > 0 && h.Test[0] != "NONE" {
		r := &ReadyCheck{Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
		switch h.Test[0] {
		case "CMD":
			r.Cmd = h.Test[1:]
		case "CMD-SHELL":
			r.Cmd = append([]string{"/bin/sh", "-c"}, strings.Join(h.Test[1:], " "))
		default:
			return nil, fmt.Errorf("healthcheck: unknown test kind %q (want CMD or CMD-SHELL)", h.Test[0])
		}
		if len(r.Cmd) == 0 {
			return nil, fmt.Errorf("healthcheck: empty command")
		}
		return r, nil
	}
	if len(c.ReadyCmd) > 0 {
		return &ReadyCheck{Cmd: c.ReadyCmd}, nil
	}
	if s := strings.TrimSpace(c.Labels[LabelReadyCmd]); s != "" {
		return &ReadyCheck{Cmd: []string{"/bin/sh", "-c", s}}, nil
	}
	port := c.ReadyPort
	if s := strings.TrimSpace(c.Labels[LabelReadyPort]); s != "" && port == 0 {
		p, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("label %s: %q is not a port", LabelReadyPort, s)
		}
		port = p
	}
	if port != 0 {
		if port < 1 || port > 65535 {
			return nil, fmt.Errorf("ready port %d out of range", port)
		}
		return &ReadyCheck{Port: port}, nil
	}
	return nil, nil
}

// firstTCPPort is the lowest EXPOSEd TCP port ("8080/tcp", "8080").
func firstTCPPort(ports []string) int {
	best := 0
	for _, p := range ports {
		num, proto, _ := strings.Cut(p, "/")
		if proto != "" && proto != "tcp" {
			continue
		}
		n, err := strconv.Atoi(num)
		if err == nil && n > 0 && n < 65536 && (best == 0 || n < best) {
			best = n
		}
	}
	return best
}

// Service states, as the agent reports them.
const (
	ServiceNone     = "none"     // the sandbox runs no service
	ServiceStarting = "starting" // started, not ready yet
	ServiceReady    = "ready"
	ServiceFailed   = "failed" // gave up: never ready, or restarted too often
)

// ServiceStatus is the agent's view of the service (GET /service).
type ServiceStatus struct {
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	// Error says why the service failed.
	Error string `json:"error,omitempty"`
	// Output is the tail of the service's (and its checks') output.
	Output string         `json:"output,omitempty"`
	Events []ServiceEvent `json:"events,omitempty"`
}

// ServiceEvent is one notable moment of the service (start, exit, ready).
type ServiceEvent struct {
	Time    time.Time      `json:"time"`
	Level   string         `json:"level"`
	Message string         `json:"message"`
	Fields  map[string]any `json:"fields,omitempty"`
}
