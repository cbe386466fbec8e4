package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/version"
)

// Config configures a Dispatcher.
type Config struct {
	Registry *Registry
	// AllowPrivate lets webhooks reach loopback, private and link-local
	// addresses and the daemon's own (WEBHOOK_ALLOW_PRIVATE).
	AllowPrivate bool
	// Timeout bounds one delivery attempt, connection to response.
	Timeout time.Duration
	// MaxAttempts is how often one event is tried; Backoff is the wait
	// before the second try, doubling after each (at most MaxBackoff).
	MaxAttempts int
	Backoff     time.Duration
	MaxBackoff  time.Duration
	// Queue bounds each endpoint's waiting deliveries; more are dropped
	// (and recorded as dropped).
	Queue int
	// CacheFor is how long a tenant's webhook list is reused before the
	// store is read again (another replica's change shows after it).
	CacheFor time.Duration
	// Formats encode an event for webhooks of a Format other than "" (the
	// E2B door gives "e2b"); a webhook of an unknown format gets the
	// native body.
	Formats map[string]func(events.Event) ([]byte, error)
	Logger  *slog.Logger
}

// Dispatcher delivers recorded events to the webhooks that want them.
// Each replica delivers the events it recorded itself, so an event goes
// out once whatever the number of replicas.
type Dispatcher struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	intake chan []events.Event

	mu        sync.Mutex
	endpoints map[string]*endpoint // by webhook id
	cache     map[string]cached    // owner -> webhooks

	delivered, failed, dropped atomic.Int64

	stop chan struct{}
	// base is cancelled by Close: attempts in flight end at once.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

type cached struct {
	hooks []Webhook
	at    time.Time
}

// endpoint is one webhook's worker and queue.
type endpoint struct {
	hook  atomic.Pointer[Webhook]
	queue chan job
	quit  chan struct{}
}

type job struct {
	ev     events.Event
	body   []byte
	format string
}

// NewDispatcher returns a dispatcher; Start runs it.
func NewDispatcher(cfg Config) *Dispatcher {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 1
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Minute
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1000
	}
	if cfg.CacheFor <= 0 {
		cfg.CacheFor = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: dialControl(cfg.AllowPrivate)}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the address check
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
	}
	base, cancel := context.WithCancel(context.Background())
	return &Dispatcher{
		base: base, cancel: cancel,
		cfg: cfg, log: cfg.Logger,
		client: &http.Client{Transport: tr, Timeout: cfg.Timeout,
			// A redirect would aim the delivery elsewhere than registered.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		intake:    make(chan []events.Event, 1024),
		endpoints: map[string]*endpoint{},
		cache:     map[string]cached{},
		stop:      make(chan struct{}),
	}
}

// Start runs the dispatch loop until Close.
func (d *Dispatcher) Start() {
	d.wg.Add(1)
	go d.loop()
}

// Close stops every worker; deliveries waiting or retrying are abandoned.
func (d *Dispatcher) Close() {
	d.once.Do(func() { close(d.stop); d.cancel() })
	d.wg.Wait()
	d.client.CloseIdleConnections()
}

// Counts returns deliveries delivered, failed and dropped since start.
func (d *Dispatcher) Counts() (delivered, failed, dropped int64) {
	return d.delivered.Load(), d.failed.Load(), d.dropped.Load()
}

// Events takes recorded events (an events.Log subscriber): it never
// blocks the event writer.
func (d *Dispatcher) Events(batch []events.Event) {
	select {
	case d.intake <- batch:
	default:
		d.dropped.Add(int64(len(batch)))
		d.log.Warn("webhook deliveries dropped: the dispatcher is behind", "events", len(batch))
	}
}

// Forget drops the cached webhooks of owner (after a change through this
// replica) and stops the worker of a deleted webhook.
func (d *Dispatcher) Forget(owner, deletedID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.cache, owner)
	delete(d.cache, allGroup)
	if ep, ok := d.endpoints[deletedID]; ok && deletedID != "" {
		close(ep.quit)
		delete(d.endpoints, deletedID)
	}
}

func (d *Dispatcher) loop() {
	defer d.wg.Done()
	for {
		select {
		case <-d.stop:
			return
		case batch := <-d.intake:
			d.dispatch(batch)
		}
	}
}

func (d *Dispatcher) dispatch(batch []events.Event) {
	for _, ev := range batch {
		hooks := d.hooksFor(ev.Owner)
		bodies := map[string][]byte{} // by format
		for i := range hooks {
			w := &hooks[i]
			if !w.wants(ev.Type) || (!w.AllTenants && w.Owner != ev.Owner) {
				continue
			}
			format, enc := d.encoder(w.Format)
			body, ok := bodies[format]
			if !ok {
				var err error
				if body, err = enc(ev); err != nil {
					d.log.Error("encode event for webhooks", "format", format, "err", err)
					continue
				}
				bodies[format] = body
			}
			ep := d.endpoint(w)
			select {
			case ep.queue <- job{ev: ev, body: body, format: format}:
			default:
				d.dropped.Add(1)
				d.finish(w.ID, Delivery{ID: deliveryID(w.ID, ev.ID), EventID: ev.ID, EventType: ev.Type, SandboxID: ev.SandboxID,
					Status: "dropped", Error: fmt.Sprintf("the endpoint's queue of %d deliveries is full", d.cfg.Queue), Time: time.Now().UTC()})
			}
		}
	}
}

// encoder is the body maker of a webhook's format (the native JSON
// event when the format has none).
func (d *Dispatcher) encoder(format string) (string, func(events.Event) ([]byte, error)) {
	if enc := d.cfg.Formats[format]; enc != nil {
		return format, enc
	}
	return "", func(e events.Event) ([]byte, error) { return json.Marshal(e) }
}

// Redeliver sends ev to w again, queued behind w's pending deliveries and
// retried like any other. Its outcome is recorded as a new delivery with
// the same delivery id, so a receiver that deduplicates by it still can.
func (d *Dispatcher) Redeliver(w Webhook, ev events.Event) error {
	format, enc := d.encoder(w.Format)
	body, err := enc(ev)
	if err != nil {
		return fmt.Errorf("encode event %d for webhook %s: %w", ev.ID, w.ID, err)
	}
	ep := d.endpoint(&w)
	select {
	case ep.queue <- job{ev: ev, body: body, format: format}:
		return nil
	default:
		return sandbox.Errorf(sandbox.ClassQuota, "the queue of webhook %s is full (%d deliveries): try again later", w.ID, d.cfg.Queue)
	}
}

// hooksFor returns the webhooks for owner's events, cached for CacheFor.
func (d *Dispatcher) hooksFor(owner string) []Webhook {
	d.mu.Lock()
	c, ok := d.cache[owner]
	d.mu.Unlock()
	if ok && time.Since(c.at) < d.cfg.CacheFor {
		return c.hooks
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hooks, err := d.cfg.Registry.forEvents(ctx, owner)
	if err != nil {
		d.log.Warn("read webhooks; using the last known", "owner", owner, "err", err)
		return c.hooks
	}
	d.mu.Lock()
	d.cache[owner] = cached{hooks: hooks, at: time.Now()}
	d.mu.Unlock()
	return hooks
}

// endpoint returns w's worker, started on first use, with w's current
// URL and secret.
func (d *Dispatcher) endpoint(w *Webhook) *endpoint {
	d.mu.Lock()
	defer d.mu.Unlock()
	ep, ok := d.endpoints[w.ID]
	if !ok {
		ep = &endpoint{queue: make(chan job, d.cfg.Queue), quit: make(chan struct{})}
		d.endpoints[w.ID] = ep
		d.wg.Add(1)
		go d.work(ep)
	}
	c := *w
	ep.hook.Store(&c)
	return ep
}

// work delivers one endpoint's queue in order: an event is tried until it
// is delivered or out of attempts before the next one goes, so a
// receiver sees each sandbox's events in the order they happened.
func (d *Dispatcher) work(ep *endpoint) {
	defer d.wg.Done()
	for {
		select {
		case <-d.stop:
			return
		case <-ep.quit:
			return
		case j := <-ep.queue:
			d.deliver(ep, j)
		}
	}
}

func deliveryID(hookID string, eventID uint64) string {
	return hookID + "-" + strconv.FormatUint(eventID, 10)
}

func (d *Dispatcher) deliver(ep *endpoint, j job) {
	w := ep.hook.Load()
	out := Delivery{ID: deliveryID(w.ID, j.ev.ID), EventID: j.ev.ID, EventType: j.ev.Type, SandboxID: j.ev.SandboxID}
	wait := d.cfg.Backoff
	for attempt := 1; attempt <= d.cfg.MaxAttempts; attempt++ {
		w = ep.hook.Load() // a changed URL or secret applies from the next attempt
		out.Attempts = attempt
		out.Time = time.Now().UTC()
		out.StatusCode, out.Error = d.post(w, out.ID, j)
		if out.Error == "" {
			out.Status = "delivered"
			d.delivered.Add(1)
			d.finish(w.ID, out)
			return
		}
		if attempt == d.cfg.MaxAttempts {
			break
		}
		// Jitter keeps many failing endpoints from retrying in step.
		delay := wait/2 + rand.N(wait)
		select {
		case <-time.After(delay):
		case <-d.stop:
			return
		case <-ep.quit:
			return
		}
		wait = min(wait*2, d.cfg.MaxBackoff)
	}
	out.Status = "failed"
	d.failed.Add(1)
	d.log.Warn("webhook delivery failed", "webhook", w.ID, "event", j.ev.ID, "attempts", out.Attempts, "err", out.Error)
	d.finish(w.ID, out)
}

// post makes one attempt; it returns the status code and, unless the
// endpoint answered 2xx, why it failed.
func (d *Dispatcher) post(w *Webhook, deliveryID string, j job) (int, string) {
	body := j.body
	ctx, cancel := context.WithTimeout(d.base, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentbox-webhook/"+version.Version)
	req.Header.Set(HeaderWebhookID, w.ID)
	req.Header.Set(HeaderDeliveryID, deliveryID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(w.Secret, now, body))
	if j.format == "e2b" {
		// E2B's headers, its signature (no timestamp: the Agentbox-*
		// signature above is the one that also stops replays).
		req.Header.Set("e2b-webhook-id", w.ID)
		req.Header.Set("e2b-delivery-id", deliveryID)
		req.Header.Set("e2b-signature-version", "v1")
		req.Header.Set("e2b-signature", SignE2B(w.Secret, body))
	}
	resp, err := d.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Sprintf("no answer within %s", d.cfg.Timeout)
		}
		return 0, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Sprintf("answered %d", resp.StatusCode)
	}
	return resp.StatusCode, ""
}

func (d *Dispatcher) finish(id string, out Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.cfg.Registry.record(ctx, id, out); err != nil {
		d.log.Warn("record webhook delivery", "webhook", id, "err", err)
	}
}
