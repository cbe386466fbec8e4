package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/audit"
)

func readAudit(t *testing.T, d *daemon, query string) audit.Page {
	t.Helper()
	status, data := d.call(t, "GET", "/v1/audit"+query, "ko", nil)
	var p audit.Page
	if status != 200 || json.Unmarshal(data, &p) != nil {
		t.Fatalf("audit %s: %d %s", query, status, data)
	}
	return p
}

// TestAuditLog: state-changing calls on the native API, the E2B door and
// MCP are recorded with who, from where, what and the result; reads are
// not; the operator queries and exports them, a tenant gets 403.
func TestAuditLog(t *testing.T) {
	d := startDaemon(t, "API_KEYS=ka:alice,kb:bob,ko:op", "TEMPLATE_ADMIN_USERS=op", "POOL_SIZE=0")
	sb := createRaw(t, d, "ka", map[string]any{})
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+sb+"/exec", "ka", map[string]any{"cmd": []string{"true"}}); status != 200 {
		t.Fatalf("exec: %d %s", status, data)
	}
	d.call(t, "GET", "/v1/sandboxes/"+sb, "ka", nil) // a read: not audited
	if status, _ := d.call(t, "DELETE", "/v1/sandboxes/"+sb, "kb", nil); status != 404 {
		t.Fatalf("bob deletes alice's sandbox: %d", status)
	}
	if status, _ := d.call(t, "POST", "/v1/sandboxes", "wrong-key", map[string]any{}); status != 401 {
		t.Fatalf("a bad key: %d", status)
	}
	status, data := d.call(t, "POST", "/sandboxes", "", map[string]any{"templateID": "base", "timeout": 60}, "X-API-Key", "ka")
	var e2b struct{ SandboxID string }
	if status != 201 || json.Unmarshal(data, &e2b) != nil {
		t.Fatalf("e2b create: %d %s", status, data)
	}
	if status, data := d.call(t, "DELETE", "/sandboxes/"+e2b.SandboxID, "", nil, "X-API-Key", "ka"); status != 204 {
		t.Fatalf("e2b kill: %d %s", status, data)
	}
	mcpStatus, _ := d.call(t, "POST", "/mcp", "ka", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize",
		"params": map[string]any{"protocolVersion": "2025-03-26", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}},
		"Accept", "application/json, text/event-stream")
	if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+sb, "ka", nil); status != 204 {
		t.Fatalf("delete: %d %s", status, data)
	}

	// The writer is asynchronous: wait (bounded) for the last call's entry.
	var all audit.Page
	for i := 0; ; i++ {
		all = readAudit(t, d, "?limit=1000")
		if n := len(all.Entries); n > 0 && all.Entries[n-1].Method == "DELETE" && all.Entries[n-1].Status == 204 && all.Entries[n-1].Target == sb {
			break
		}
		if i == 100 {
			t.Fatalf("the last delete is not in the audit log: %+v", all.Entries)
		}
		time.Sleep(50 * time.Millisecond)
	}
	type key struct {
		user, method, path, target string
		status                     int
	}
	want := []key{
		{"alice", "POST", "/v1/sandboxes", "", 201},
		{"alice", "POST", "/v1/sandboxes/" + sb + "/exec", sb, 200},
		{"bob", "DELETE", "/v1/sandboxes/" + sb, sb, 404},
		{"", "POST", "/v1/sandboxes", "", 401},
		{"alice", "POST", "/sandboxes", "", 201},
		{"alice", "DELETE", "/sandboxes/" + e2b.SandboxID, e2b.SandboxID, 204},
		{"alice", "POST", "/mcp", "", mcpStatus},
		{"alice", "DELETE", "/v1/sandboxes/" + sb, sb, 204},
	}
	if len(all.Entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(all.Entries), len(want), all.Entries)
	}
	for i, e := range all.Entries {
		if got := (key{e.User, e.Method, e.Path, e.Target, e.Status}); got != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got, want[i])
		}
		if e.Remote != "127.0.0.1" || e.RequestID == "" || e.Time.IsZero() || e.ID == 0 {
			t.Errorf("entry %d lacks its origin: %+v", i, e)
		}
	}
	if r := all.Entries[1].Route; r != "POST /v1/sandboxes/{id}/exec" {
		t.Errorf("exec's route %q", r)
	}

	// Filters and pages.
	if p := readAudit(t, d, "?target="+sb); len(p.Entries) != 3 {
		t.Errorf("target=%s: %d entries, want 3", sb, len(p.Entries))
	}
	if p := readAudit(t, d, "?status=4xx"); len(p.Entries) != 2 {
		t.Errorf("status=4xx: %d entries, want 2", len(p.Entries))
	}
	if p := readAudit(t, d, "?user=bob&method=DELETE"); len(p.Entries) != 1 {
		t.Errorf("user=bob: %d entries", len(p.Entries))
	}
	if p := readAudit(t, d, "?path=/sandboxes/"); len(p.Entries) != 1 {
		t.Errorf("path=/sandboxes/: %d entries", len(p.Entries))
	}
	p := readAudit(t, d, "?limit=3")
	if len(p.Entries) != 3 || !p.More {
		t.Fatalf("a page of 3: %+v", p)
	}
	if rest := readAudit(t, d, "?after="+url.QueryEscape(jsonNum(p.Next))); len(rest.Entries) != len(want)-3 {
		t.Errorf("after the first page: %d entries", len(rest.Entries))
	}
	if p := readAudit(t, d, "?since="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))); len(p.Entries) != 0 {
		t.Errorf("since an hour ahead: %d entries", len(p.Entries))
	}
	if status, _ := d.call(t, "GET", "/v1/audit?status=teapot", "ko", nil); status != 400 {
		t.Errorf("a bad status filter: %d", status)
	}

	// Export as JSON lines.
	status, data = d.call(t, "GET", "/v1/audit?format=jsonl&target="+sb, "ko", nil)
	if status != 200 {
		t.Fatalf("export: %d %s", status, data)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	lines := 0
	for sc.Scan() {
		var e audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Target != sb {
			t.Fatalf("export line %d: %v %s", lines, err, sc.Text())
		}
		lines++
	}
	if lines != 3 {
		t.Fatalf("export: %d lines, want 3", lines)
	}

	// Tenants may not read it.
	for _, k := range []string{"ka", "kb"} {
		if status, _ := d.call(t, "GET", "/v1/audit", k, nil); status != 403 {
			t.Errorf("tenant %s reads the audit log: %d, want 403", k, status)
		}
	}
}

func jsonNum(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
