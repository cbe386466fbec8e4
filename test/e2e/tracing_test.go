package e2e

import (
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP traces endpoint on loopback: it decodes
// each export (protobuf, as the OTLP spec has it) and keeps the spans.
type otlpReceiver struct {
	url     string
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // service.name of each export's resources
	auth    []string // the Authorization header of each export
}

func startOTLPReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		var body io.Reader = http.MaxBytesReader(w, req.Body, 32<<20)
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		for _, rs := range export.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					r.service = append(r.service, a.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

// waitSpans waits (at most 30 s) until ok holds for the spans of trace
// traceID received so far, and returns them.
func (r *otlpReceiver) waitSpans(t *testing.T, traceID []byte, ok func([]*tracepb.Span) bool) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var of []*tracepb.Span
		r.mu.Lock()
		for _, s := range r.spans {
			if string(s.TraceId) == string(traceID) {
				of = append(of, s)
			}
		}
		r.mu.Unlock()
		if ok(of) {
			return of
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range of {
				names = append(names, s.Name)
			}
			t.Fatalf("spans of trace %x after 30 s: %v", traceID, names)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func spanNamed(spans []*tracepb.Span, name string) *tracepb.Span {
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func childrenOf(spans []*tracepb.Span, parent *tracepb.Span) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if parent != nil && string(s.ParentSpanId) == string(parent.SpanId) {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			if v, ok := a.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(v.IntValue, 10)
			}
			return a.Value.GetStringValue()
		}
	}
	return ""
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestTraces: with an OTLP endpoint set, a create carrying a W3C
// traceparent exports its span tree to a receiver on loopback — the API
// call's server span as a child of the caller's span, sandbox.create under
// it, backend.create under that, and the native backend's phases under
// backend.create — with the configured headers and service name; a call
// without traceparent starts a trace of its own.
func TestTraces(t *testing.T) {
	recv := startOTLPReceiver(t)
	d := startDaemon(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.url, "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20collector-token",
		"OTEL_BSP_SCHEDULE_DELAY=100")

	traceID, callerSpan := randomHex(t, 16), randomHex(t, 8)
	code, body := d.call(t, "POST", "/v1/sandboxes", "", map[string]any{"template": "host"}, "traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	id := mustJSON(t, body)["id"].(string)
	code, body = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "", map[string]any{"cmd": []string{"true"}}, "traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	if code != http.StatusOK {
		t.Fatalf("exec: %d %s", code, body)
	}

	tid, _ := hex.DecodeString(traceID)
	spans := recv.waitSpans(t, tid, func(s []*tracepb.Span) bool {
		create := spanNamed(s, "backend.create")
		return spanNamed(s, "POST /v1/sandboxes/{id}/exec") != nil && create != nil && len(childrenOf(s, create)) >= 3
	})
	server := spanNamed(spans, "POST /v1/sandboxes")
	if server == nil {
		t.Fatal("no server span POST /v1/sandboxes")
	}
	if hex.EncodeToString(server.ParentSpanId) != callerSpan || server.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span: parent %x kind %v, want the caller's %s, server", server.ParentSpanId, server.Kind, callerSpan)
	}
	if got := spanAttr(server, "http.response.status_code"); got != "201" {
		t.Errorf("server span status code %q", got)
	}
	create := spanNamed(spans, "sandbox.create")
	if create == nil || string(create.ParentSpanId) != string(server.SpanId) {
		t.Fatalf("sandbox.create missing or not under the server span: %v", create)
	}
	if got := spanAttr(create, "agentbox.sandbox"); got != id {
		t.Errorf("sandbox.create names sandbox %q, want %s", got, id)
	}
	backend := spanNamed(spans, "backend.create")
	if string(backend.ParentSpanId) != string(create.SpanId) {
		t.Errorf("backend.create is not under sandbox.create")
	}
	phases := childrenOf(spans, backend)
	var phaseTotal uint64
	for _, p := range phases {
		if spanAttr(p, "agentbox.operation") != "create" {
			t.Errorf("phase span %q: operation %q", p.Name, spanAttr(p, "agentbox.operation"))
		}
		if p.StartTimeUnixNano < backend.StartTimeUnixNano || p.EndTimeUnixNano > backend.EndTimeUnixNano {
			t.Errorf("phase span %q lies outside backend.create", p.Name)
		}
		phaseTotal += p.EndTimeUnixNano - p.StartTimeUnixNano
	}
	if whole := backend.EndTimeUnixNano - backend.StartTimeUnixNano; phaseTotal > whole {
		t.Errorf("phases add up to %d ns, more than backend.create's %d", phaseTotal, whole)
	}
	if spanNamed(phases, "agent start until ready byte") == nil {
		var names []string
		for _, p := range phases {
			names = append(names, p.Name)
		}
		t.Errorf("no agent-start phase among %v", names)
	}
	if spanNamed(spans, "store.put") == nil {
		t.Error("no store.put span")
	}

	// A call without trace context starts a trace of its own.
	code, _ = d.call(t, "DELETE", "/v1/sandboxes/"+id, "", nil)
	if code != http.StatusNoContent && code != http.StatusOK {
		t.Fatalf("delete: %d", code)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		recv.mu.Lock()
		var del *tracepb.Span
		for _, s := range recv.spans {
			if s.Name == "DELETE /v1/sandboxes/{id}" {
				del = s
			}
		}
		recv.mu.Unlock()
		if del != nil {
			if string(del.TraceId) == string(tid) || len(del.ParentSpanId) != 0 {
				t.Errorf("delete span: trace %x parent %x, want a new root", del.TraceId, del.ParentSpanId)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no span for the delete after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, a := range recv.auth {
		if a != "Bearer collector-token" {
			t.Errorf("export Authorization %q, want the configured header", a)
		}
	}
	for _, s := range recv.service {
		if s != "agentbox" {
			t.Errorf("service.name %q", s)
		}
	}
}

// BenchmarkTracingOverhead: create + exec + delete of a host sandbox on a
// daemon exporting every span to a receiver on loopback, against one with
// no endpoint (the default), interleaved so both see the same machine.
func BenchmarkTracingOverhead(b *testing.B) {
	recv := startOTLPReceiver(b)
	common := []string{"POOL_SIZE=0", "MAX_SANDBOX_INSTANCES=0", "MAX_SANDBOXES_PER_USER=0", "NETWORK=off", "BEARER_TOKEN=kb"}
	urls := map[string]string{
		"off": startBenchDaemon(b, common...),
		"on":  startBenchDaemon(b, append(common, "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.url, "OTEL_BSP_SCHEDULE_DELAY=200")...),
	}
	onOffCycles(b, urls["off"], urls["on"])
	recv.mu.Lock()
	b.ReportMetric(float64(len(recv.spans))/float64(b.N), "spans/op")
	recv.mu.Unlock()
}
