package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/webhook"
)

// hookReceiver is a webhook endpoint on loopback that keeps what it gets.
type hookReceiver struct {
	mu       sync.Mutex
	got      []delivered
	failNext int // answer 500 to this many requests first
	hang     chan struct{}
	url      string
}

type delivered struct {
	body                []byte
	ts, sig, deliveryID string
	e2bSig              string
	ev                  map[string]any
}

func startReceiver(t *testing.T, hang bool) *hookReceiver {
	t.Helper()
	r := &hookReceiver{}
	if hang {
		r.hang = make(chan struct{})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		if r.hang != nil {
			select {
			case <-r.hang:
			case <-req.Context().Done():
			}
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.failNext > 0 {
			r.failNext--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		d := delivered{body: body, ts: req.Header.Get(webhook.HeaderTimestamp), sig: req.Header.Get(webhook.HeaderSignature),
			deliveryID: req.Header.Get(webhook.HeaderDeliveryID), e2bSig: req.Header.Get("e2b-signature")}
		_ = json.Unmarshal(body, &d.ev)
		r.got = append(r.got, d)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() {
		if r.hang != nil {
			close(r.hang)
		}
		srv.Close()
	})
	r.url = "http://" + ln.Addr().String() + "/hook"
	return r
}

func (r *hookReceiver) deliveries() []delivered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivered(nil), r.got...)
}

// sseEvents reads up to n events of the stream from after (0: the start),
// within wait, and closes it.
func sseEvents(t *testing.T, d *daemon, key string, after uint64, n int, wait time.Duration) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []map[string]any
	var id string
	sc := bufio.NewScanner(resp.Body)
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			var ev map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("stream data: %v", err)
			}
			if fmt.Sprint(ev["id"]) != id {
				t.Fatalf("SSE id %s for event %v", id, ev["id"])
			}
			out = append(out, ev)
		}
	}
	return out
}

func evID(ev map[string]any) uint64 { f, _ := ev["id"].(float64); return uint64(f) }

func cause(ev map[string]any) (kind, by string) {
	c, _ := ev["cause"].(map[string]any)
	kind, _ = c["kind"].(string)
	by, _ = c["by"].(string)
	return kind, by
}

// TestEventsAndWebhooks drives the lifecycle through a real daemon and
// checks the events it records, streams and delivers: a webhook receiver
// on loopback gets signed events in order per sandbox for create, pause,
// resume and kill (by whom), an OOM-killed process, an expiry and an idle
// reaping with their causes, after answering 500 once; another tenant's
// receiver that hangs does not delay them; a forged, altered or replayed
// delivery fails the documented check; the SSE stream resumes after a
// disconnect without loss or repetition; tenants see only their events;
// E2B's events route reports the same causes.
func TestEventsAndWebhooks(t *testing.T) {
	d := startDaemon(t, "API_KEYS=ka:alice,kb:bob,ko:op", "TEMPLATE_ADMIN_USERS=op", "HEARTBEAT_TIMEOUT=2",
		"WEBHOOK_ALLOW_PRIVATE=true", "WEBHOOK_RETRY_BACKOFF=0.1", "WEBHOOK_TIMEOUT=60", "POOL_SIZE=0", "METRICS_TOKEN=mt")
	alice := startReceiver(t, false)
	alice.failNext = 1
	bobs := startReceiver(t, true)

	status, data := d.call(t, "POST", "/v1/webhooks", "ka", map[string]any{"url": alice.url})
	if status != 201 {
		t.Fatalf("register alice's webhook: %d %s", status, data)
	}
	aw := mustJSON(t, data)
	secret, _ := aw["secret"].(string)
	if secret == "" {
		t.Fatalf("no secret in the create answer: %s", data)
	}
	if status, data := d.call(t, "POST", "/v1/webhooks", "kb", map[string]any{"url": bobs.url}); status != 201 {
		t.Fatalf("register bob's webhook: %d %s", status, data)
	}
	// Without the operator's setting such a target is refused; here it is
	// allowed, but a tenant still cannot ask for every tenant's events.
	if status, data := d.call(t, "POST", "/v1/webhooks", "kb", map[string]any{"url": bobs.url, "all_tenants": true}); status != 403 {
		t.Fatalf("bob asked for all tenants' events: %d %s", status, data)
	}

	// An E2B-style webhook (E2B's routes and shape) for kills only.
	e2bHook := startReceiver(t, false)
	status, data = d.call(t, "POST", "/events/webhooks", "", map[string]any{"name": "e2b", "url": e2bHook.url, "enabled": true,
		"events": []string{"sandbox.lifecycle.killed"}, "signatureSecret": "e2b-secret-123"}, "X-API-Key", "ka")
	if status != 201 || !strings.Contains(string(data), `"events":["sandbox.lifecycle.killed"]`) {
		t.Fatalf("register an E2B webhook: %d %s", status, data)
	}

	// Bob's first: his endpoint hangs on it for the whole test.
	bobSB := createRaw(t, d, "kb", map[string]any{})
	if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+bobSB, "kb", nil); status != 204 {
		t.Fatalf("bob's delete: %d %s", status, data)
	}

	sb := createRaw(t, d, "ka", map[string]any{})
	for _, op := range []string{"pause", "resume"} {
		if status, data := d.call(t, "POST", "/v1/sandboxes/"+sb+"/"+op, "ka", map[string]any{}); status != 200 {
			t.Fatalf("%s: %d %s", op, status, data)
		}
	}
	if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+sb, "ka", nil); status != 204 {
		t.Fatalf("delete: %d %s", status, data)
	}
	oom := createRaw(t, d, "ka", map[string]any{"resources": map[string]any{"memory": "64M"}})
	status, data = d.call(t, "POST", "/v1/sandboxes/"+oom+"/exec", "ka", map[string]any{"cmd": []string{"python3", "-c", "x = bytearray(300 << 20)"}})
	if status != 200 || mustJSON(t, data)["oom_killed"] != true {
		t.Fatalf("memory blow-up: %d %s", status, data)
	}
	short := createRaw(t, d, "ka", map[string]any{"timeout": 1})
	status, data = d.call(t, "POST", "/v1/sessions/chat/connect", "ka", map[string]any{"user_id": "u1", "types": []string{"base"}})
	if status != 200 {
		t.Fatalf("session connect: %d %s", status, data)
	}
	sessSB := ""
	if sbs, _ := mustJSON(t, data)["sandboxes"].([]any); len(sbs) == 1 {
		sessSB, _ = sbs[0].(map[string]any)["id"].(string)
	}
	if sessSB == "" {
		t.Fatalf("session sandbox: %s", data)
	}

	// An agent that dies on its own (killed from the host, as the OOM
	// killer would) stops its sandbox with the exit status.
	crash := createRaw(t, d, "ka", map[string]any{})
	if err := syscall.Kill(agentHostPid(t, d, crash), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// What alice's receiver must get, per sandbox in this order.
	want := map[string][]string{
		sb:     {"created/api/alice", "paused/api/alice", "resumed/api/alice", "killed/api/alice"},
		oom:    {"created/api/alice", "process_killed/oom_kill/"},
		short:  {"created/api/alice", "expired/timeout/"},
		sessSB: {"created/api/alice", "expired/idle/"},
		crash:  {"created/api/alice", "stopped/agent_exit/"},
	}
	perSandbox := func() map[string][]string {
		got := map[string][]string{}
		for _, dl := range alice.deliveries() {
			k, by := cause(dl.ev)
			id, _ := dl.ev["sandbox_id"].(string)
			got[id] = append(got[id], fmt.Sprintf("%s/%s/%s", dl.ev["type"], k, by))
		}
		return got
	}
	complete := func() bool {
		got := perSandbox()
		for id, w := range want {
			if len(got[id]) < len(w) {
				return false
			}
		}
		return true
	}
	for i := 0; i < 300 && !complete(); i++ { // bounded: 300 x 50ms
		time.Sleep(50 * time.Millisecond)
	}
	got := perSandbox()
	for id, w := range want {
		if strings.Join(got[id], " ") != strings.Join(w, " ") {
			t.Errorf("sandbox %s: receiver got %v, want %v", id, got[id], w)
		}
	}
	for _, dl := range alice.deliveries() {
		if dl.ev["sandbox_id"] == crash && dl.ev["type"] == "stopped" {
			if x, _ := dl.ev["exit"].(map[string]any); x["code"] != float64(137) || x["signal"] != "SIGKILL" {
				t.Errorf("agent death reported with exit %v, want code 137, SIGKILL", dl.ev["exit"])
			}
		}
	}
	if _, ok := got[bobSB]; ok {
		t.Errorf("alice's receiver got bob's events")
	}
	if len(bobs.deliveries()) != 0 {
		t.Errorf("bob's hanging receiver completed deliveries")
	}
	// The E2B webhook got the kills (and expiries) in E2B's shape, signed
	// E2B's way.
	for i := 0; i < 100 && len(e2bHook.deliveries()) < 3; i++ { // bounded: 100 x 50ms
		time.Sleep(50 * time.Millisecond)
	}
	e2bGot := e2bHook.deliveries()
	if len(e2bGot) != 3 { // sb killed, short and the session's expired
		t.Errorf("E2B webhook got %d deliveries, want 3", len(e2bGot))
	}
	for _, dl := range e2bGot {
		sum := sha256.Sum256(append([]byte("e2b-secret-123"), dl.body...))
		if dl.ev["type"] != "sandbox.lifecycle.killed" || dl.ev["sandboxTeamId"] != "alice" || dl.e2bSig != base64.RawStdEncoding.EncodeToString(sum[:]) {
			t.Errorf("E2B delivery %s (signature %q)", dl.body, dl.e2bSig)
		}
	}
	dls := alice.deliveries()
	if len(dls) == 0 {
		t.Fatal("no deliveries")
	}
	// Every delivery passes the documented check; a forged, altered or
	// replayed one fails it.
	now := time.Now()
	for _, dl := range dls {
		if err := webhook.Verify(secret, dl.ts, dl.sig, dl.body, now, webhook.DefaultTolerance); err != nil {
			t.Fatalf("genuine delivery %s fails verification: %v", dl.deliveryID, err)
		}
	}
	first := dls[0]
	if webhook.Verify("not-the-secret", first.ts, first.sig, first.body, now, webhook.DefaultTolerance) == nil {
		t.Error("a delivery signed with another secret verifies")
	}
	if webhook.Verify(secret, first.ts, first.sig, []byte(strings.Replace(string(first.body), "alice", "mallory", 1)), now, webhook.DefaultTolerance) == nil {
		t.Error("an altered body verifies")
	}
	if webhook.Verify(secret, first.ts, first.sig, first.body, now.Add(10*time.Minute), webhook.DefaultTolerance) == nil {
		t.Error("a delivery replayed 10 minutes later verifies")
	}
	// The first delivery was retried after the 500, and recorded so.
	status, data = d.call(t, "GET", "/v1/webhooks/"+aw["id"].(string)+"/deliveries", "ka", nil)
	if status != 200 || !strings.Contains(string(data), `"attempts":2`) || !strings.Contains(string(data), `"status":"delivered"`) {
		t.Errorf("deliveries: %d %s", status, data)
	}
	if status, _ := d.call(t, "GET", "/v1/webhooks/"+aw["id"].(string)+"/deliveries", "kb", nil); status != 404 {
		t.Errorf("bob reads alice's deliveries: %d", status)
	}

	// The list: alice sees only hers; bob only his; the operator can ask
	// for bob's.
	status, data = d.call(t, "GET", "/v1/events?limit=1000", "ka", nil)
	if status != 200 {
		t.Fatalf("list: %d %s", status, data)
	}
	var page struct {
		Events []map[string]any `json:"events"`
	}
	_ = json.Unmarshal(data, &page)
	for _, ev := range page.Events {
		if ev["owner"] != "alice" {
			t.Fatalf("alice's list has %v", ev)
		}
	}
	status, data = d.call(t, "GET", "/v1/events?owner=alice", "kb", nil)
	if status != 403 {
		t.Errorf("bob reading alice's events: %d %s", status, data)
	}
	status, data = d.call(t, "GET", "/v1/events?owner=bob&type=killed", "ko", nil)
	if status != 200 || !strings.Contains(string(data), bobSB) {
		t.Errorf("operator reading bob's kills: %d %s", status, data)
	}

	// The stream: 3 events, a disconnect, then the rest from the last id
	// seen: exactly the list, none lost or repeated.
	head := sseEvents(t, d, "ka", 0, 3, 10*time.Second)
	if len(head) != 3 {
		t.Fatalf("stream gave %d events before the disconnect", len(head))
	}
	rest := sseEvents(t, d, "ka", evID(head[2]), len(page.Events)-3, 10*time.Second)
	streamed := append(head, rest...)
	if len(streamed) != len(page.Events) {
		t.Fatalf("streamed %d events across a reconnect, listed %d", len(streamed), len(page.Events))
	}
	for i := range streamed {
		if evID(streamed[i]) != evID(page.Events[i]) {
			t.Fatalf("event %d: streamed id %d, listed %d", i, evID(streamed[i]), evID(page.Events[i]))
		}
	}
	// Live: an event recorded while the stream waits arrives on it.
	liveDone := make(chan []map[string]any, 1)
	go func() { liveDone <- sseEvents(t, d, "ka", evID(streamed[len(streamed)-1]), 1, 20*time.Second) }()
	live := createRaw(t, d, "ka", map[string]any{})
	if evs := <-liveDone; len(evs) != 1 || evs[0]["sandbox_id"] != live || evs[0]["type"] != "created" {
		t.Errorf("live stream gave %v, want the create of %s", evs, live)
	}

	// The counters show it.
	status, data = d.call(t, "GET", "/metrics", "mt", nil)
	if status != 200 || !strings.Contains(string(data), "agentbox_events_dropped_total 0") ||
		strings.Contains(string(data), "agentbox_events_recorded_total 0") || strings.Contains(string(data), "agentbox_webhook_deliveries_delivered_total 0") {
		t.Errorf("metrics: %d, want events recorded, none dropped, deliveries delivered", status)
	}

	// E2B's events route tells the expiry's cause too.
	status, data = d.call(t, "GET", "/events/sandboxes/"+short+"?orderAsc=true", "", nil, "X-API-Key", "ka")
	if status != 200 || !strings.Contains(string(data), `"type":"sandbox.lifecycle.killed"`) || !strings.Contains(string(data), `"kind":"timeout"`) {
		t.Errorf("E2B events of the expired sandbox: %d %s", status, data)
	}
	status, data = d.call(t, "GET", "/events/sandboxes/"+sb, "", nil, "X-API-Key", "kb")
	if status != 200 || strings.TrimSpace(string(data)) != "[]" {
		t.Errorf("E2B events of alice's sandbox, read by bob: %d %s", status, data)
	}
}

// TestEventsTwoReplicas: two daemons on one Redis record events in one
// sequence: each lists the other's, with the same ids, and a stream on
// one gets an event the other records.
func TestEventsTwoReplicas(t *testing.T) {
	_, _, ds := startReplicas(t, 2, "CLUSTER_PLACEMENT=local", "POOL_SIZE=0")
	// Without WEBHOOK_ALLOW_PRIVATE a tenant cannot aim webhooks at the
	// daemon's host, private ranges or the metadata address.
	for _, target := range []string{"http://127.0.0.1:8000/", "http://10.0.0.1/", "http://169.254.169.254/latest", "http://[::1]/"} {
		if status, data := ds[0].call(t, "POST", "/v1/webhooks", "k1", map[string]any{"url": target}); status != 400 {
			t.Errorf("webhook to %s: %d %s, want 400", target, status, data)
		}
	}
	a := createRaw(t, ds[0], "k1", map[string]any{})
	head := sseEvents(t, ds[1], "k1", 0, 1, 10*time.Second)
	if len(head) != 1 || head[0]["sandbox_id"] != a || head[0]["node"] != "r0" {
		t.Fatalf("r1's stream starts with %v, want r0's create of %s", head, a)
	}
	done := make(chan []map[string]any, 1)
	go func() { done <- sseEvents(t, ds[0], "k1", evID(head[0]), 1, 20*time.Second) }()
	b := createRaw(t, ds[1], "k1", map[string]any{})
	if evs := <-done; len(evs) != 1 || evs[0]["sandbox_id"] != b || evs[0]["node"] != "r1" {
		t.Fatalf("r0's live stream got %v, want r1's create of %s", evs, b)
	}
	var lists [2]string
	for i, d := range ds {
		status, data := d.call(t, "GET", "/v1/events?type=created", "k1", nil)
		if status != 200 {
			t.Fatalf("list on r%d: %d %s", i, status, data)
		}
		var page struct {
			Events []map[string]any `json:"events"`
		}
		_ = json.Unmarshal(data, &page)
		for _, ev := range page.Events {
			lists[i] += fmt.Sprintf("%v:%v ", evID(ev), ev["sandbox_id"])
		}
	}
	if lists[0] != lists[1] || !strings.Contains(lists[0], a) || !strings.Contains(lists[0], b) {
		t.Fatalf("replicas list different events: r0 %q, r1 %q", lists[0], lists[1])
	}
}
