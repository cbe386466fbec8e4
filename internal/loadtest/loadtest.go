// Package loadtest drives a running agentbox daemon with concurrent clients
// that create sandboxes, run shell commands and Python cells, write and read
// back files (1 KiB to 50 MiB), and destroy them, through the native API and
// the agentscope-compatible routes. It counts errors by kind (quota and
// capacity errors are expected under load and counted apart), prints
// throughput and latency percentiles while it runs, and destroys whatever it
// created even when a client fails. Leak checks of the daemon and the host
// are in leaks.go. Used by `agentbox load`, the e2e load and soak tests, and
// docs/reliability.md.
package loadtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// Config describes one run.
type Config struct {
	URL    string // the daemon
	APIKey string // native API key ("" when the daemon has none)
	// AgentscopeToken is the daemon's BEARER_TOKEN; "" leaves the
	// agentscope routes out.
	AgentscopeToken string
	Clients         int
	Duration        time.Duration
	// MaxFileBytes caps the file sizes drawn (default 50 MiB).
	MaxFileBytes int64
	// Interval between progress lines (default 10s); Out receives them.
	Interval time.Duration
	Out      io.Writer
	// Template of native sandboxes ("" = the daemon's default).
	Template string
	// OpTimeout bounds each request (default 2 minutes): a hang is an error.
	OpTimeout time.Duration
	// Seed makes the file sizes and contents reproducible.
	Seed uint64
}

// Error kinds that load alone may cause and the API documents: the
// instance limit (quota_exceeded / agentscope's null create), admission
// and backend capacity (unavailable, insufficient_space).
var expectedKinds = map[string]bool{"quota_exceeded": true, "unavailable": true, "insufficient_space": true, "capacity": true}

// Expected reports whether an error kind is a documented quota or capacity
// error rather than a failure.
func Expected(kind string) bool { return expectedKinds[kind] }

// Result is what a run measured.
type Result struct {
	Elapsed time.Duration
	Ops     map[string]*OpStats // by operation
	Errors  map[string]int      // by kind: an API code, "timeout", "mismatch", "transport", ...
	// Samples are the first unexpected errors, for the report.
	Samples []string
}

// OpStats are one operation's counts and latencies.
type OpStats struct {
	Count, Errors int
	Bytes         int64
	lat           []time.Duration
}

// Percentile returns the p-th percentile (0-100) of the successful calls.
func (o *OpStats) Percentile(p float64) time.Duration { return percentile(o.lat, p) }

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// Total is the number of operations and of errors.
func (r *Result) Total() (ops, errs int) {
	for _, o := range r.Ops {
		ops += o.Count
		errs += o.Errors
	}
	return ops, errs
}

// Unexpected is the number of errors that are not quota or capacity errors.
func (r *Result) Unexpected() int {
	n := 0
	for k, v := range r.Errors {
		if !Expected(k) {
			n += v
		}
	}
	return n
}

// Report writes the final figures.
func (r *Result) Report(w io.Writer) {
	ops, errs := r.Total()
	fmt.Fprintf(w, "load: %d operations in %s (%.1f/s), %d errors (%d unexpected)\n",
		ops, r.Elapsed.Round(time.Second), float64(ops)/r.Elapsed.Seconds(), errs, r.Unexpected())
	names := make([]string, 0, len(r.Ops))
	for n := range r.Ops {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "  %-18s %8s %7s %10s %10s %10s\n", "operation", "count", "errors", "p50", "p99", "MiB")
	for _, n := range names {
		o := r.Ops[n]
		fmt.Fprintf(w, "  %-18s %8d %7d %10s %10s %10.1f\n", n, o.Count, o.Errors,
			o.Percentile(50).Round(time.Millisecond), o.Percentile(99).Round(time.Millisecond), float64(o.Bytes)/(1<<20))
	}
	kinds := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		tag := "unexpected"
		if Expected(k) {
			tag = "expected (quota/capacity)"
		}
		fmt.Fprintf(w, "  error %-20s %6d  %s\n", k, r.Errors[k], tag)
	}
	for _, s := range r.Samples {
		fmt.Fprintf(w, "  sample: %s\n", s)
	}
}

// recorder collects results from every client.
type recorder struct {
	mu      sync.Mutex
	res     *Result
	window  []time.Duration // latencies since the last progress line
	winOps  int
	winErrs int
}

func (rc *recorder) op(name string, d time.Duration, bytes int64, err error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	o := rc.res.Ops[name]
	if o == nil {
		o = &OpStats{}
		rc.res.Ops[name] = o
	}
	o.Count++
	rc.winOps++
	if err != nil {
		o.Errors++
		rc.winErrs++
		kind := Kind(err)
		rc.res.Errors[kind]++
		if !Expected(kind) && len(rc.res.Samples) < 10 {
			rc.res.Samples = append(rc.res.Samples, fmt.Sprintf("%s: %s: %v", name, kind, err))
		}
		return
	}
	o.Bytes += bytes
	o.lat = append(o.lat, d)
	rc.window = append(rc.window, d)
}

func (rc *recorder) progress(w io.Writer, start time.Time, every time.Duration) {
	rc.mu.Lock()
	lat, n, e := rc.window, rc.winOps, rc.winErrs
	rc.window, rc.winOps, rc.winErrs = nil, 0, 0
	rc.mu.Unlock()
	fmt.Fprintf(w, "load: t=%4.0fs  %6.1f ops/s  p50 %8s  p99 %8s  errors %d\n", time.Since(start).Seconds(),
		float64(n)/every.Seconds(), percentile(lat, 50).Round(time.Millisecond), percentile(lat, 99).Round(time.Millisecond), e)
}

// errMismatch is a wrong answer: output or file contents not what was sent.
var errMismatch = errors.New("mismatch")

// kindError carries an error kind decided where the error was seen.
type kindError struct {
	kind string
	err  error
}

func (k *kindError) Error() string { return k.err.Error() }
func (k *kindError) Unwrap() error { return k.err }

// Kind classifies an error: the API's code, "capacity" (agentscope's null
// create), "timeout", "mismatch", or "transport".
func Kind(err error) string {
	var ke *kindError
	var ae *client.Error
	switch {
	case errors.As(err, &ke):
		return ke.kind
	case errors.As(err, &ae):
		return ae.Code
	case errors.Is(err, errMismatch):
		return "mismatch"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "transport"
}

// Run runs the load until cfg.Duration has passed (or ctx ends) and returns
// what it measured. Every sandbox a client created is destroyed before Run
// returns, whatever happened.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Clients <= 0 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("loadtest: clients and duration must be positive")
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 50 << 20
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 2 * time.Minute
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	var opts []client.Option
	if cfg.APIKey != "" {
		opts = append(opts, client.WithAPIKey(cfg.APIKey))
	}
	c, err := client.New(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	rc := &recorder{res: &Result{Ops: map[string]*OpStats{}, Errors: map[string]int{}}}
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		for {
			select {
			case <-tick.C:
				rc.progress(cfg.Out, start, cfg.Interval)
			case <-stopProgress:
				return
			}
		}
	}()

	var wg sync.WaitGroup
	// Rounds start until cfg.Duration has passed; the last ones finish.
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{cfg: cfg, c: c, rc: rc, rnd: rand.New(rand.NewPCG(cfg.Seed, uint64(i))), n: i,
				hc: &http.Client{}}
			for iter := 0; runCtx.Err() == nil; iter++ {
				// A round runs to its end under ctx, not runCtx: a create
				// cancelled by the end of the run could complete in the
				// daemon after its caller left, leaving a sandbox nobody
				// knows about until its timeout.
				if cfg.AgentscopeToken != "" && (i+iter)%3 == 2 {
					w.agentscopeRound(ctx)
				} else {
					w.nativeRound(ctx)
				}
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone
	rc.res.Elapsed = time.Since(start)
	return rc.res, nil
}

// worker is one client.
type worker struct {
	cfg Config
	c   *client.Client
	hc  *http.Client
	rc  *recorder
	rnd *rand.Rand
	n   int
}

// timed runs fn under the per-operation timeout and records it.
func (w *worker) timed(ctx context.Context, name string, fn func(ctx context.Context) (int64, error)) error {
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	t0 := time.Now()
	n, err := fn(octx)
	if err != nil && ctx.Err() != nil {
		return err // the run ended mid-call: not a result
	}
	w.rc.op(name, time.Since(t0), n, err)
	return err
}

// fileSize draws a size: mostly small files, sometimes large ones, the
// largest (cfg.MaxFileBytes) rarely.
func (w *worker) fileSize() int64 {
	sizes := []struct {
		n      int64
		weight int
	}{{1 << 10, 40}, {64 << 10, 25}, {1 << 20, 20}, {8 << 20, 10}, {50 << 20, 5}}
	x := w.rnd.IntN(100)
	for _, s := range sizes {
		if x < s.weight {
			return min(s.n, w.cfg.MaxFileBytes)
		}
		x -= s.weight
	}
	return 1 << 10
}

// cleanupCtx outlives the run's context: what was created is destroyed
// even when the run ended or failed.
func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

// nativeRound: create, shell, Python cell, file round trip, destroy.
func (w *worker) nativeRound(ctx context.Context) {
	var sb *client.Sandbox
	if w.timed(ctx, "create", func(ctx context.Context) (int64, error) {
		var err error
		req := client.CreateRequest{Template: w.cfg.Template, Timeout: 5 * time.Minute,
			Metadata: map[string]string{"loadtest": fmt.Sprint(w.n)}}
		if w.rnd.IntN(4) == 0 {
			// Some sandboxes with egress networking (a veth, nftables
			// rules and a DNS filter each): their teardown is checked too.
			req.Network = &client.Network{Mode: "egress", AllowOut: []string{"*.example.org", "192.0.2.0/24"}}
		}
		sb, err = w.c.Create(ctx, req)
		return 0, err
	}) != nil {
		w.backoff(ctx)
		return
	}
	defer func() {
		cctx, cancel := cleanupCtx()
		defer cancel()
		_ = w.timed(cctx, "destroy", func(ctx context.Context) (int64, error) {
			err := w.c.Delete(ctx, sb.ID)
			var ae *client.Error
			if errors.As(err, &ae) && ae.Code == client.CodeNotFound && ctx.Err() == nil {
				return 0, nil // already gone (its timeout): nothing leaked
			}
			return 0, err
		})
	}()
	_ = w.timed(ctx, "exec_shell", func(ctx context.Context) (int64, error) {
		res, err := w.c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo $((6*7)); ls / >/dev/null"}})
		if err != nil {
			return 0, err
		}
		if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "42" {
			return 0, fmt.Errorf("%w: exit %d stdout %q", errMismatch, res.ExitCode, res.Stdout)
		}
		return 0, nil
	})
	_ = w.timed(ctx, "python_cell", func(ctx context.Context) (int64, error) {
		body, err := w.raw(ctx, "POST", "/v1/sandboxes/"+sb.ID+"/code", "", map[string]any{"code": "x = 6 * 7\nprint(x)"})
		if err != nil {
			return 0, err
		}
		if !bytes.Contains(body, []byte(`42`)) {
			return 0, fmt.Errorf("%w: code output %.200q", errMismatch, body)
		}
		return 0, nil
	})
	w.fileRoundTrip(ctx, sb.ID)
}

// fileRoundTrip writes a file of a drawn size and reads it back.
func (w *worker) fileRoundTrip(ctx context.Context, id string) {
	size := w.fileSize()
	data := make([]byte, size)
	for i := 0; i < len(data); i += 8 {
		v := w.rnd.Uint64()
		for j := 0; j < 8 && i+j < len(data); j++ {
			data[i+j] = byte(v >> (8 * j))
		}
	}
	want := sha256.Sum256(data)
	path := fmt.Sprintf("/workspace/load-%d.bin", w.n)
	if w.timed(ctx, "file_write", func(ctx context.Context) (int64, error) {
		_, err := w.c.Upload(ctx, id, path, bytes.NewReader(data), size, nil)
		return size, err
	}) != nil {
		return
	}
	_ = w.timed(ctx, "file_read", func(ctx context.Context) (int64, error) {
		rd, _, err := w.c.Download(ctx, id, path)
		if err != nil {
			return 0, err
		}
		defer rd.Close()
		h := sha256.New()
		n, err := io.Copy(h, rd)
		if err != nil {
			return n, err
		}
		if n != size || !bytes.Equal(h.Sum(nil), want[:]) {
			return n, fmt.Errorf("%w: read %d bytes back of %d, or other bytes", errMismatch, n, size)
		}
		return n, nil
	})
}

// agentscopeRound: create, run_shell_command, run_ipython_cell, a
// workspace file through /proxy, release.
func (w *worker) agentscopeRound(ctx context.Context) {
	var id string
	if w.timed(ctx, "as_create", func(ctx context.Context) (int64, error) {
		body, err := w.raw(ctx, "POST", "/create", w.cfg.AgentscopeToken, map[string]any{"sandbox_type": "base"})
		if err != nil {
			return 0, err
		}
		var out struct{ Data *string }
		if err := json.Unmarshal(body, &out); err != nil {
			return 0, fmt.Errorf("%w: create answered %.200q", errMismatch, body)
		}
		if out.Data == nil {
			return 0, &kindError{"capacity", errors.New("agentscope create: no capacity (data null)")}
		}
		id = *out.Data
		return 0, nil
	}) != nil {
		w.backoff(ctx)
		return
	}
	defer func() {
		cctx, cancel := cleanupCtx()
		defer cancel()
		_ = w.timed(cctx, "as_release", func(ctx context.Context) (int64, error) {
			_, err := w.raw(ctx, "POST", "/release", w.cfg.AgentscopeToken, map[string]any{"identity": id})
			return 0, err
		})
	}()
	tool := func(name string, args map[string]any, want string) {
		_ = w.timed(ctx, "as_"+name, func(ctx context.Context) (int64, error) {
			body, err := w.raw(ctx, "POST", "/call_tool", w.cfg.AgentscopeToken,
				map[string]any{"identity": id, "tool_name": name, "arguments": args})
			if err != nil {
				return 0, err
			}
			if !bytes.Contains(body, []byte(want)) || bytes.Contains(body, []byte(`"isError":true`)) {
				return 0, fmt.Errorf("%w: %s answered %.200q", errMismatch, name, body)
			}
			return 0, nil
		})
	}
	tool("run_shell_command", map[string]any{"command": "echo $((6*7))"}, `"text":"42\n"`)
	tool("run_ipython_cell", map[string]any{"code": "print(6 * 7)"}, `42`)
	payload := fmt.Sprintf("agentscope payload %d %d", w.n, w.rnd.Uint64())
	_ = w.timed(ctx, "as_file", func(ctx context.Context) (int64, error) {
		if _, err := w.rawBody(ctx, "PUT", "/proxy/"+id+"/workspace/file?path=load.txt", w.cfg.AgentscopeToken, strings.NewReader(payload)); err != nil {
			return 0, err
		}
		got, err := w.rawBody(ctx, "GET", "/proxy/"+id+"/workspace/file?path=/workspace/load.txt", w.cfg.AgentscopeToken, nil)
		if err != nil {
			return 0, err
		}
		if string(got) != payload {
			return 0, fmt.Errorf("%w: file read back %.100q", errMismatch, got)
		}
		return int64(len(payload)), nil
	})
}

// backoff waits a little after a refused create so a full daemon is not
// hammered (bounded by the run's context).
func (w *worker) backoff(ctx context.Context) {
	t := time.NewTimer(time.Duration(100+w.rnd.IntN(400)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *worker) raw(ctx context.Context, method, path, token string, body any) ([]byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return w.rawBody(ctx, method, path, token, bytes.NewReader(data))
}

// rawBody does one HTTP call; a non-2xx answer is an error of the API's
// code (or "http_<status>" when the body is not the API's error shape).
func (w *worker) rawBody(ctx context.Context, method, path, token string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, w.cfg.URL+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	switch {
	case token != "":
		req.Header.Set("Authorization", "Bearer "+token)
	case w.cfg.APIKey != "":
		req.Header.Set("Authorization", "Bearer "+w.cfg.APIKey)
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(data, &e)
		kind := e.Code
		if kind == "" {
			kind = fmt.Sprintf("http_%d", resp.StatusCode)
		}
		return nil, &kindError{kind, fmt.Errorf("%s %s: %d %.200s", method, path, resp.StatusCode, data)}
	}
	return data, nil
}
