package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

func TestSignVerify(t *testing.T) {
	body := []byte(`{"id":1}`)
	now := time.Unix(1_800_000_000, 0)
	ts := "1800000000"
	sig := Sign("s3cret", now, body)
	if err := Verify("s3cret", ts, sig, body, now.Add(time.Minute), DefaultTolerance); err != nil {
		t.Fatalf("genuine delivery refused: %v", err)
	}
	if err := Verify("s3cret", ts, "v1=00ff,"+sig, body, now, DefaultTolerance); err != nil {
		t.Fatalf("rotated signature list refused: %v", err)
	}
	for name, c := range map[string]struct {
		secret, ts, sig string
		body            []byte
		now             time.Time
		want            error
	}{
		"other secret":    {"guess", ts, sig, body, now, ErrBadSignature},
		"altered body":    {"s3cret", ts, sig, []byte(`{"id":2}`), now, ErrBadSignature},
		"moved timestamp": {"s3cret", "1800000001", sig, body, now, ErrBadSignature},
		"replayed late":   {"s3cret", ts, sig, body, now.Add(6 * time.Minute), ErrStale},
		"from the future": {"s3cret", ts, sig, body, now.Add(-6 * time.Minute), ErrStale},
		"unsigned":        {"s3cret", ts, "", body, now, ErrNoSignature},
		"bad timestamp":   {"s3cret", "yesterday", sig, body, now, ErrNoSignature},
	} {
		if err := Verify(c.secret, c.ts, c.sig, c.body, c.now, DefaultTolerance); err != c.want {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{"ftp://x/", "http://", "http://u:p@example.com/", "http://127.0.0.1:9/", "http://[::1]/", "http://10.1.2.3/",
		"http://192.168.0.1/", "http://169.254.169.254/latest/meta-data", "http://[fe80::1]/", "http://0.0.0.0/", "http://100.64.0.1/", "http://localhost/"} {
		if _, err := CheckURL(ctx, bad, false); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%s accepted (%v)", bad, err)
		}
	}
	if _, err := CheckURL(ctx, "https://93.184.215.14/hook", false); err != nil {
		t.Errorf("public address refused: %v", err)
	}
	if _, err := CheckURL(ctx, "http://127.0.0.1:9/", true); err != nil {
		t.Errorf("loopback refused with WEBHOOK_ALLOW_PRIVATE: %v", err)
	}
	if blocked(netip.MustParseAddr("::ffff:127.0.0.1")) == "" {
		t.Error("v4-mapped loopback not blocked")
	}
	// The dialer checks the address it connects to.
	if err := dialControl(false)("tcp4", "127.0.0.1:80", nil); err == nil {
		t.Error("dial to loopback allowed")
	}
	if err := dialControl(true)("tcp4", "127.0.0.1:80", nil); err != nil {
		t.Error(err)
	}
}

// receiver is a test endpoint recording verified deliveries.
type receiver struct {
	mu     sync.Mutex
	ids    []uint64
	srv    *httptest.Server
	secret string
	bad    int
}

func newReceiver(t *testing.T, handle func(w http.ResponseWriter) bool) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if handle != nil && !handle(w) {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if Verify(r.secret, req.Header.Get(HeaderTimestamp), req.Header.Get(HeaderSignature), body, time.Now(), DefaultTolerance) != nil {
			r.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev events.Event
		_ = json.Unmarshal(body, &ev)
		r.ids = append(r.ids, ev.ID)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.ids...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 500 && !cond(); i++ { // bounded: 500 x 10ms
		time.Sleep(10 * time.Millisecond)
	}
	if !cond() {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Deliveries are signed, in order, retried after 500s, recorded; an
// endpoint that hangs does not hold up another tenant's; types filter.
func TestDispatcher(t *testing.T) {
	ctx := context.Background()
	reg := NewRegistry(store.NewMemory(), 0)
	var failMu sync.Mutex
	fails := 2
	flaky := newReceiver(t, func(w http.ResponseWriter) bool {
		failMu.Lock()
		defer failMu.Unlock()
		if fails > 0 {
			fails--
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		return true
	})
	release := make(chan struct{})
	hang := newReceiver(t, func(w http.ResponseWriter) bool { <-release; return true })
	defer close(release)

	a, err := reg.Create(ctx, Webhook{Owner: "alice", URL: flaky.srv.URL, Enabled: true, Events: []events.Type{events.Created, events.Killed}})
	if err != nil {
		t.Fatal(err)
	}
	flaky.secret = a.Secret
	b, _ := reg.Create(ctx, Webhook{Owner: "bob", URL: hang.srv.URL, Enabled: true})
	hang.secret = b.Secret

	d := NewDispatcher(Config{Registry: reg, AllowPrivate: true, Timeout: 30 * time.Second, MaxAttempts: 5, Backoff: 5 * time.Millisecond, Queue: 4})
	d.Start()
	defer d.Close()
	var batch []events.Event
	for i := uint64(1); i <= 12; i++ {
		owner, typ := "alice", events.Created
		if i%2 == 0 {
			owner = "bob"
		}
		if i%3 == 0 {
			typ = events.Paused // alice's webhook does not want these
		}
		batch = append(batch, events.Event{ID: i, Type: typ, Owner: owner, SandboxID: "sb"})
	}
	d.Events(batch)
	// alice: 1, 5, 7, 11 (odd, not multiples of 3), despite bob's hanging
	// endpoint and her own two 500s.
	waitFor(t, "alice's deliveries", func() bool { return len(flaky.got()) == 4 })
	if got := flaky.got(); got[0] != 1 || got[1] != 5 || got[2] != 7 || got[3] != 11 {
		t.Fatalf("alice got %v", got)
	}
	waitFor(t, "the outcomes recorded", func() bool {
		ds, _ := reg.Deliveries(ctx, a.ID)
		return len(ds) == 4
	})
	ds, _ := reg.Deliveries(ctx, a.ID)
	if first := ds[len(ds)-1]; first.Status != "delivered" || first.Attempts != 3 || first.EventID != 1 {
		t.Fatalf("first delivery recorded as %+v, want delivered after 3 attempts", first)
	}
	// bob's endpoint hangs on event 2; his queue of 4 overflows: the last
	// of his 6 events is dropped (and recorded so), the earliest waits.
	waitFor(t, "bob's dropped delivery", func() bool {
		ds, _ := reg.Deliveries(ctx, b.ID)
		return len(ds) >= 1 && ds[0].Status == "dropped" && ds[0].EventID == 12
	})
	if got := hang.got(); len(got) != 0 {
		t.Fatalf("the hanging endpoint completed %v", got)
	}
	if flaky.bad != 0 {
		t.Fatalf("%d deliveries failed verification", flaky.bad)
	}
}

// A tenant sees and changes only its own webhooks; the cap holds.
func TestRegistry(t *testing.T) {
	ctx := context.Background()
	reg := NewRegistry(store.NewMemory(), 2)
	w, err := reg.Create(ctx, Webhook{Owner: "alice", URL: "https://example.com/h", Enabled: true})
	if err != nil || w.Secret == "" || w.ID == "" {
		t.Fatalf("create: %+v %v", w, err)
	}
	if _, err := reg.Get(ctx, "bob", false, w.ID); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("bob got alice's webhook: %v", err)
	}
	if _, err := reg.Get(ctx, "op", true, w.ID); err != nil {
		t.Fatalf("operator: %v", err)
	}
	if err := reg.Delete(ctx, "bob", false, w.ID); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Fatalf("bob deleted alice's webhook: %v", err)
	}
	if _, err := reg.Create(ctx, Webhook{Owner: "alice", URL: "https://example.com/2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Create(ctx, Webhook{Owner: "alice", URL: "https://example.com/3"}); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Fatalf("third webhook over the cap of 2: %v", err)
	}
	up, err := reg.Update(ctx, "alice", false, w.ID, func(x *Webhook) error { x.Enabled = false; x.AllTenants = true; return nil })
	if err != nil || up.Enabled || !up.AllTenants {
		t.Fatalf("update: %+v %v", up, err)
	}
	if l, _ := reg.List(ctx, "alice"); len(l) != 2 {
		t.Fatalf("list after moving to all tenants: %d", len(l))
	}
	if hs, _ := reg.forEvents(ctx, "carol"); len(hs) != 1 || hs[0].ID != w.ID {
		t.Fatalf("all-tenant webhook not offered carol's events: %+v", hs)
	}
	if err := reg.Delete(ctx, "alice", false, w.ID); err != nil {
		t.Fatal(err)
	}
	if l, _ := reg.List(ctx, "alice"); len(l) != 1 {
		t.Fatalf("list after delete: %d", len(l))
	}
}

// A redelivered event reaches the endpoint again, signed, and its outcome
// is recorded as a second delivery with the same id.
func TestRedeliver(t *testing.T) {
	ctx := context.Background()
	reg := NewRegistry(store.NewMemory(), 0)
	rcv := newReceiver(t, nil)
	w, err := reg.Create(ctx, Webhook{Owner: "alice", URL: rcv.srv.URL, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	rcv.secret = w.Secret
	d := NewDispatcher(Config{Registry: reg, AllowPrivate: true, Timeout: 30 * time.Second, MaxAttempts: 2, Backoff: 5 * time.Millisecond, Queue: 4})
	d.Start()
	defer d.Close()
	ev := events.Event{ID: 7, Type: events.Created, Owner: "alice", SandboxID: "sb"}
	d.Events([]events.Event{ev})
	waitFor(t, "the first delivery", func() bool { ds, _ := reg.Deliveries(ctx, w.ID); return len(ds) == 1 })
	if err := d.Redeliver(w, ev); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the redelivery", func() bool { ds, _ := reg.Deliveries(ctx, w.ID); return len(ds) == 2 })
	ds, _ := reg.Deliveries(ctx, w.ID)
	if got := rcv.got(); len(got) != 2 || got[0] != 7 || got[1] != 7 || rcv.bad != 0 {
		t.Fatalf("received %v (%d unverified)", got, rcv.bad)
	}
	if ds[0].ID != ds[1].ID || ds[0].Status != "delivered" {
		t.Fatalf("deliveries %+v", ds)
	}
}
