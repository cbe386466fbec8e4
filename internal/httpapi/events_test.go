package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// EventQuery reads the filters, keeps tenants to their own events and
// refuses what it cannot read.
func TestEventQuery(t *testing.T) {
	r := httptest.NewRequest("GET", "/v1/events?sandbox=sb1&type=killed,expired&type=paused&since=2026-01-02T03:04:05Z&limit=5", nil)
	r.Header.Set("Last-Event-ID", "41")
	q, err := EventQuery(r, "alice", false)
	if err != nil || q.Owner != "alice" || q.Sandbox != "sb1" || len(q.Types) != 3 || q.Types[2] != events.Paused ||
		q.After != 41 || q.Limit != 5 || q.Since.IsZero() {
		t.Fatalf("query %+v, %v", q, err)
	}
	if q, _ := EventQuery(httptest.NewRequest("GET", "/v1/events?after=7", nil), "alice", false); q.After != 7 || q.Limit != 100 {
		t.Fatalf("after= and the default limit: %+v", q)
	}
	if q, err := EventQuery(httptest.NewRequest("GET", "/v1/events?owner=bob", nil), "op", true); err != nil || q.Owner != "bob" {
		t.Fatalf("operator asking for bob's: %+v %v", q, err)
	}
	if q, _ := EventQuery(httptest.NewRequest("GET", "/v1/events", nil), "op", true); q.Owner != "" {
		t.Fatalf("operator's default is everyone's: %+v", q)
	}
	for url, class := range map[string]sandbox.Class{
		"/v1/events?owner=bob":       sandbox.ClassForbidden,
		"/v1/events?type=exploded":   sandbox.ClassInvalid,
		"/v1/events?since=yesterday": sandbox.ClassInvalid,
		"/v1/events?after=-1":        sandbox.ClassInvalid,
		"/v1/events?limit=0":         sandbox.ClassInvalid,
		"/v1/events?limit=100000":    sandbox.ClassInvalid,
		"/v1/events?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z": sandbox.ClassInvalid,
	} {
		if _, err := EventQuery(httptest.NewRequest("GET", url, nil), "alice", false); sandbox.ClassOf(err) != class {
			t.Errorf("%s: %v, want %s", url, err, class)
		}
	}
}
