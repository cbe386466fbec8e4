package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	pb "github.com/agentbox/agentbox/api/proto/process"
	"github.com/agentbox/agentbox/internal/agent/codeinterp"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// The service a template runs (sandbox.Service) is started by the agent
// after it listens, as an ordinary process of the sandbox: the agent's
// user, the default working directory and environment, the sandbox's
// cgroup and limits. It is listed by the process API with ServiceTag and
// restarted with backoff when it exits. GET /service reports its state.

// ServiceTag is the process tag of the service (and of its checks).
const (
	ServiceTag      = "agentbox-service"
	serviceCheckTag = "agentbox-service-check"
)

const (
	serviceBackoffMin = 200 * time.Millisecond
	serviceBackoffMax = 10 * time.Second
	// serviceStableAfter: a service that ran this long starts a fresh
	// count of consecutive restarts (and a fresh backoff).
	serviceStableAfter = 30 * time.Second
	// Readiness checks run at most this far apart before ready (a Docker
	// HEALTHCHECK's 30s default interval is for liveness, not start-up).
	readyIntervalMax     = time.Second
	readyIntervalDefault = 250 * time.Millisecond
	readyTimeoutDefault  = 10 * time.Second
	serviceOutputMax     = 8 << 10
	serviceEventsMax     = 64
)

// supervisor runs one sandbox.Service.
type supervisor struct {
	s    *Server
	spec sandbox.Service

	mu     sync.Mutex
	st     sandbox.ServiceStatus
	output []byte // tail, at most serviceOutputMax
}

func newSupervisor(s *Server, spec *sandbox.Service) *supervisor {
	state := sandbox.ServiceNone
	if spec != nil {
		state = sandbox.ServiceStarting
	} else {
		spec = &sandbox.Service{}
	}
	return &supervisor{s: s, spec: *spec, st: sandbox.ServiceStatus{State: state}}
}

func (s *Server) handleService(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.svc.status())
}

// StartService starts the configured service (Config.Service), if any.
// It returns at once; the service runs until ctx ends or the server shuts
// down.
func (s *Server) StartService(ctx context.Context) {
	if s.svc.st.State == sandbox.ServiceNone {
		return
	}
	go s.svc.run(ctx)
}

func (v *supervisor) status() sandbox.ServiceStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := v.st
	st.Output = string(v.output)
	st.Events = append([]sandbox.ServiceEvent(nil), v.st.Events...)
	return st
}

func (v *supervisor) event(level, msg string, fields map[string]any) {
	v.s.log.Log(context.Background(), levelOf(level), "service: "+msg, "fields", fields)
	v.mu.Lock()
	defer v.mu.Unlock()
	ev := sandbox.ServiceEvent{Time: time.Now().UTC(), Level: level, Message: msg, Fields: fields}
	if len(v.st.Events) >= serviceEventsMax {
		// Keep the first events (how it started) and the latest ones.
		v.st.Events = append(v.st.Events[:serviceEventsMax/2], v.st.Events[serviceEventsMax/2+1:]...)
	}
	v.st.Events = append(v.st.Events, ev)
}

func (v *supervisor) appendOutput(b []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.output = append(v.output, b...)
	if n := len(v.output); n > serviceOutputMax {
		v.output = append(v.output[:0], v.output[n-serviceOutputMax:]...)
	}
}

// setState moves starting to ready or failed; ready and failed are final.
func (v *supervisor) setState(state, why string) bool {
	v.mu.Lock()
	if v.st.State != sandbox.ServiceStarting {
		v.mu.Unlock()
		return false
	}
	v.st.State, v.st.Error = state, why
	v.mu.Unlock()
	if state == sandbox.ServiceReady {
		v.event("info", "service ready", nil)
	} else {
		v.event("error", "service failed", map[string]any{"error": why})
	}
	return true
}

func (v *supervisor) state() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.st.State
}

func (v *supervisor) run(ctx context.Context) {
	if v.spec.CodeContext != "" {
		if err := v.warm(ctx); err != nil {
			v.setState(sandbox.ServiceFailed, err.Error())
			return
		}
	}
	started := make(chan struct{})
	if len(v.spec.Cmd) > 0 {
		go v.loop(ctx, started)
	} else {
		close(started)
	}
	if v.spec.Ready == nil {
		select {
		case <-started:
			v.setState(sandbox.ServiceReady, "")
		case <-ctx.Done():
		}
		return
	}
	v.waitReady(ctx, *v.spec.Ready)
}

// warm starts the default code context of the configured language and
// runs the warm-up code in it, so the first execution finds a running,
// warm interpreter.
func (v *supervisor) warm(ctx context.Context) error {
	start := time.Now()
	cx, err := v.s.code.reg.Default(v.spec.CodeContext)
	if err != nil {
		return fmt.Errorf("code context %q: %w", v.spec.CodeContext, err)
	}
	code := v.spec.Warmup
	if code == "" {
		code = "None" // starts the interpreter, defines nothing
		if v.spec.CodeContext != codeinterp.DefaultLanguage {
			code = "true"
		}
	}
	var failure string
	err = cx.Execute(ctx, codeinterp.ExecRequest{Code: code}, func(ev codeinterp.Event) error {
		switch ev.Type {
		case codeinterp.TypeStdout, codeinterp.TypeStderr:
			if ev.Text != nil {
				v.appendOutput([]byte(*ev.Text))
			}
		case codeinterp.TypeError:
			failure = deref(ev.Name) + ": " + deref(ev.Value)
			if ev.Traceback != nil {
				v.appendOutput([]byte(*ev.Traceback + "\n"))
			}
		}
		return nil
	})
	if err == nil && failure != "" {
		err = fmt.Errorf("warm-up of the %s context failed: %s", v.spec.CodeContext, failure)
	}
	if err != nil {
		return err
	}
	v.event("info", "code context warm", map[string]any{"language": v.spec.CodeContext, "context": cx.Info().ID,
		"ms": time.Since(start).Milliseconds()})
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// loop runs the service, restarting it with backoff when it exits, until
// ctx ends, the server shuts down, or it exited MaxRestarts times in a
// row without staying up serviceStableAfter.
func (v *supervisor) loop(ctx context.Context, started chan<- struct{}) {
	maxRestarts := v.spec.MaxRestarts
	if maxRestarts <= 0 {
		maxRestarts = sandbox.DefaultMaxRestarts
	}
	backoff, consecutive := serviceBackoffMin, 0
	once := sync.OnceFunc(func() { close(started) })
	for v.alive(ctx) {
		begin := time.Now()
		code, err := v.runOnce(once)
		if !v.alive(ctx) {
			return
		}
		fields := map[string]any{"exit": code, "restarts": v.restarts()}
		if err != nil {
			fields["error"] = err.Error()
		}
		v.event("warn", "service exited", fields)
		if time.Since(begin) >= serviceStableAfter {
			backoff, consecutive = serviceBackoffMin, 0
		}
		consecutive++
		if consecutive > maxRestarts {
			v.setState(sandbox.ServiceFailed, fmt.Sprintf("the service exited %d times in a row (last: %s)", consecutive, code))
			return
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(backoff*2, serviceBackoffMax)
		v.mu.Lock()
		v.st.Restarts++
		v.mu.Unlock()
		v.event("info", "service restarted", map[string]any{"restarts": v.restarts()})
	}
}

func (v *supervisor) alive(ctx context.Context) bool {
	return ctx.Err() == nil && !v.s.closing.Load() && v.state() != sandbox.ServiceFailed
}

func (v *supervisor) restarts() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.st.Restarts
}

// runOnce starts the service and waits for its end, keeping its output.
func (v *supervisor) runOnce(started func()) (string, error) {
	cmd := v.spec.Cmd
	p, sub, err := v.s.startInternal(cmd, ServiceTag, 0)
	if err != nil {
		return "not started", err
	}
	v.event("info", "service started", map[string]any{"pid": p.pid, "cmd": cmd})
	started()
	end := v.drain(p, sub)
	return end, nil
}

// drain reads a process's events until its end, keeping its output in
// the service's tail; it returns the end status.
func (v *supervisor) drain(p *process, sub *subscriber) string {
	defer sub.release()
	for {
		select {
		case ev := <-sub.ch:
			if d := ev.GetData(); d != nil {
				v.appendOutput(append(d.GetStdout(), d.GetStderr()...))
			}
			if e := ev.GetEnd(); e != nil {
				return e.GetStatus()
			}
		case <-sub.evicted:
			<-p.done
			return "ended (output lost)"
		}
	}
}

// startInternal starts a process of the agent's own (the service, a
// check) like the process API does: the agent's user, the default
// directory and environment, no stdin.
func (s *Server) startInternal(argv []string, tag string, timeout time.Duration) (*process, *subscriber, error) {
	noStdin := false
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: argv[0], Args: argv[1:]}, Tag: &tag, Stdin: &noStdin}
	if timeout > 0 {
		ms := uint32(min(timeout.Milliseconds(), 1<<31))
		req.TimeoutMs = &ms
	}
	return s.startProcess(http.Header{}, req)
}

// waitReady runs the readiness check until it passes, fails Retries
// times in a row after the start period, or the service failed.
func (v *supervisor) waitReady(ctx context.Context, r sandbox.ReadyCheck) {
	interval := r.Interval
	if interval <= 0 {
		interval = readyIntervalDefault
	}
	interval = min(interval, readyIntervalMax)
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = readyTimeoutDefault
	}
	begin, fails := time.Now(), 0
	for v.alive(ctx) {
		ok, why := v.check(ctx, r, timeout)
		if ok {
			v.setState(sandbox.ServiceReady, "")
			return
		}
		if time.Since(begin) >= r.StartPeriod {
			fails++
			if r.Retries > 0 && fails >= r.Retries {
				v.setState(sandbox.ServiceFailed, fmt.Sprintf("readiness check failed %d times (last: %s)", fails, why))
				return
			}
		}
		select {
		case <-time.After(interval):
		case <-ctx.Done():
			return
		}
	}
}

// check runs the readiness check once.
func (v *supervisor) check(ctx context.Context, r sandbox.ReadyCheck, timeout time.Duration) (bool, string) {
	if r.Port > 0 {
		return dialLocal(ctx, r.Port, timeout)
	}
	p, sub, err := v.s.startInternal(r.Cmd, serviceCheckTag, timeout)
	if err != nil {
		return false, err.Error()
	}
	status := v.drain(p, sub)
	return status == "exit status 0", status
}

// dialLocal reports whether something accepts TCP connections on port,
// on IPv4 or IPv6 loopback.
func dialLocal(ctx context.Context, port int, timeout time.Duration) (bool, string) {
	d := net.Dialer{Timeout: min(timeout, 2*time.Second)}
	var last error
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			c.Close()
			return true, ""
		}
		last = err
	}
	return false, fmt.Sprintf("port %d: %v", port, last)
}

func levelOf(level string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return slog.LevelInfo
	}
	return l
}
