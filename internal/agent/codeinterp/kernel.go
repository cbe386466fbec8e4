package codeinterp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Why a kernel was killed; the execution it ends reports accordingly.
const (
	killTimeout   = "timeout"   // did not stop within the grace after an interrupt
	killCancelled = "cancelled" // its client went away and it did not stop
	killRestart   = "restart"   // the context was restarted
	killDeleted   = "deleted"   // the context was deleted
	killProtocol  = "protocol"  // the driver broke the protocol
	killClose     = "close"     // the registry is shutting down
)

// maxFrame bounds one line from a driver (a result with its images).
const maxFrame = 128 << 20

// driverMsg is one NDJSON line a driver (or the bash wrapper) writes on
// fd 4.
type driverMsg struct {
	Ev        string                     `json:"ev"` // ready, start, result, error, done
	Seq       uint64                     `json:"seq"`
	Count     int                        `json:"count"`
	Main      bool                       `json:"main"`
	Data      map[string]json.RawMessage `json:"data"`
	Name      string                     `json:"name"`
	Value     string                     `json:"value"`
	Traceback string                     `json:"traceback"`
	RC        int                        `json:"rc"`
	Engine    string                     `json:"engine"`
}

// kernel is one interpreter process of a context and the goroutines that
// read its output and events.
type kernel struct {
	lang  *language
	proc  Proc
	pipes *Pipes
	nonce string // of the current execution's markers (see marker.go)
	log   *slog.Logger

	readers [2]*outReader
	events  chan driverMsg // closed once fd 4 ends
	// sink receives output while an execution runs; nil when idle
	// (output of background processes between executions is dropped).
	sink atomic.Pointer[sink]

	engine     string // reported by the driver ("ipython", "builtin", "node", "bash")
	seq        uint64 // last execution's sequence number (owned by the running execution)
	marks      uint64 // last output marker's number (owned by the running execution)
	count      int    // bash: executions so far
	killReason atomic.Pointer[string]
	teardownMu sync.Once
}

// startKernel spawns an interpreter for l in dir as user with env and
// waits until it is ready (or ctx ends, or startTimeout passes).
func startKernel(ctx context.Context, r *Registry, l *language, user, dir string, env map[string]string) (*kernel, error) {
	bin, err := l.find(r.cfg.Host, env)
	if err != nil {
		return nil, err
	}
	nonce := randomHex(12) // never leaves the agent: see marker.go
	spec := SpawnSpec{
		Path: bin, Argv: l.argv(bin), Env: envList(env, l.env), Dir: dir, User: user,
		StdinPipe: l.proto == protoBash, Control: l.proto == protoDriver, Events: true,
	}
	proc, pipes, err := r.cfg.Host.Spawn(spec)
	if err != nil {
		return nil, &Error{Kind: KindStart, Msg: "start the " + l.name + " interpreter", Err: err}
	}
	if pipes.StdoutMark == nil || pipes.StderrMark == nil {
		pipes.Close()
		_ = proc.Signal(syscall.SIGKILL) // it may be gone already
		return nil, &Error{Kind: KindStart, Msg: "start the " + l.name + " interpreter", Err: errors.New("host kept no write ends of the output pipes")}
	}
	k := &kernel{lang: l, proc: proc, pipes: pipes, nonce: nonce, events: make(chan driverMsg, 64),
		log: r.log.With("language", l.name, "pid", proc.Pid())}
	for i, f := range []io.Reader{pipes.Stdout, pipes.Stderr} {
		k.readers[i] = newOutReader(k, i, f)
		go k.readers[i].run()
	}
	go k.readEvents()

	// Keep what the interpreter says on stderr while starting: it is the
	// only explanation when it fails.
	var startErr bytes.Buffer
	startSink := newSink(func(ev Event) error {
		if ev.Type == TypeStderr && startErr.Len() < 4096 {
			startErr.WriteString(*ev.Text)
		}
		return nil
	}, 4096, 0, nil)
	startSink.started = true
	k.sink.Store(startSink)
	defer k.sink.Store(nil)

	if err := k.handshake(ctx, r.cfg.StartTimeout); err != nil {
		k.kill(killClose)
		k.teardown()
		msg := fmt.Sprintf("the %s interpreter did not start", l.name)
		if s := bytes.TrimSpace(startErr.Bytes()); len(s) > 0 {
			err = fmt.Errorf("%w; its output: %s", err, s)
		}
		return nil, &Error{Kind: KindStart, Msg: msg, Err: err}
	}
	k.log.Debug("interpreter started", "engine", k.engine)
	return k, nil
}

// handshake sends the driver its source (drivers) or the shell set-up
// (bash) and waits for the ready line.
func (k *kernel) handshake(ctx context.Context, timeout time.Duration) error {
	var err error
	if k.lang.proto == protoDriver {
		err = writeAll(k.pipes.Control, driverSource(k.lang), timeout)
	} else {
		// A trap keeps a non-interactive bash alive on SIGINT (it would
		// exit otherwise); the interrupted command still dies.
		err = writeAll(k.pipes.Stdin, []byte("trap ':' INT\nprintf '{\"ev\":\"ready\",\"engine\":\"bash\"}\\n' >&4\n"), timeout)
	}
	if err != nil {
		return fmt.Errorf("send start-up: %w", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case m, ok := <-k.events:
			if !ok {
				return k.exitError()
			}
			if m.Ev == "ready" {
				k.engine = m.Engine
				return nil
			}
		case <-k.proc.Done():
			return k.exitError()
		case <-t.C:
			return fmt.Errorf("not ready after %v", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// exitError waits a moment for the process's status and describes it.
func (k *kernel) exitError() error {
	select {
	case <-k.proc.Done():
		return fmt.Errorf("interpreter exited (%s)", k.proc.Status())
	case <-time.After(time.Second):
		return errors.New("interpreter closed its event pipe")
	}
}

// readEvents decodes fd 4 into k.events until it ends. A line that is
// not JSON means the interpreter can no longer be trusted: it is killed.
func (k *kernel) readEvents() {
	defer close(k.events)
	br := bufio.NewReaderSize(k.pipes.Events, 64<<10)
	for {
		line, err := readLine(br, maxFrame)
		if len(bytes.TrimSpace(line)) > 0 {
			var m driverMsg
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				k.log.Warn("driver broke the protocol; killing it", "err", jerr)
				k.kill(killProtocol)
				return
			}
			k.events <- m
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EBADF) && k.alive() {
				k.log.Debug("event pipe ended", "err", err)
			}
			return
		}
	}
}

// readLine reads one '\n'-terminated line of at most limit bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, fmt.Errorf("event line over %d bytes", limit)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func (k *kernel) alive() bool {
	select {
	case <-k.proc.Done():
		return false
	default:
		return true
	}
}

// interrupt sends SIGINT to the interpreter's process group: Python
// raises KeyboardInterrupt, node breaks the running script, bash kills the
// running command.
func (k *kernel) interrupt() {
	if err := k.proc.Signal(syscall.SIGINT); err != nil {
		k.log.Warn("interrupt interpreter", "err", err)
	}
}

// kill records why (the first reason wins) and kills the process group.
func (k *kernel) kill(reason string) {
	k.killReason.CompareAndSwap(nil, &reason)
	if err := k.proc.Signal(syscall.SIGKILL); err != nil {
		k.log.Warn("kill interpreter", "err", err)
	}
}

// reason returns why the agent killed the kernel ("" if it did not).
func (k *kernel) reason() string {
	if r := k.killReason.Load(); r != nil {
		return *r
	}
	return ""
}

// teardown kills the process if needed, waits (bounded) for it to be
// reaped and closes the pipes, which ends the reader goroutines even when
// background children still hold the other ends.
func (k *kernel) teardown() {
	k.teardownMu.Do(func() {
		if k.alive() {
			k.kill(killClose)
		}
		select {
		case <-k.proc.Done():
		case <-time.After(5 * time.Second):
			k.log.Warn("interpreter not reaped 5s after SIGKILL")
		}
		k.pipes.Close()
	})
}

// writeAll writes p to f, giving up after timeout (the reader is stuck).
func writeAll(f interface {
	Write([]byte) (int, error)
	SetWriteDeadline(time.Time) error
}, p []byte, timeout time.Duration) error {
	_ = f.SetWriteDeadline(time.Now().Add(timeout))
	_, err := f.Write(p)
	return err
}

// envList renders env plus the language's defaults (for keys env lacks)
// as sorted KEY=VALUE pairs.
func envList(env, defaults map[string]string) []string {
	m := make(map[string]string, len(env)+len(defaults))
	for k, v := range defaults {
		m[k] = v
	}
	for k, v := range env {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
