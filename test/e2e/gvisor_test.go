package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestGVisorSandbox creates a gVisor sandbox through the API and uses it:
// /v1/info lists the level, the sandbox reports it, exec and Python run on
// gVisor's kernel (uname), what the level lacks is refused with 503, a bad
// level with 400; a user whose minimum is gvisor gets it by default and is
// refused the container level with 403.
func TestGVisorSandbox(t *testing.T) {
	runsc := testutil.Runsc(t)
	d := startDaemon(t, "RUNSC_PATH="+runsc, "API_KEYS=ka:alice,kb:bob", `ISOLATION_BY_USER={"bob":"gvisor"}`)

	status, data := d.call(t, "GET", "/v1/info", "ka", nil)
	iso, _ := mustJSON(t, data)["isolation"].(map[string]any)
	levels, _ := iso["levels"].([]any)
	if status != 200 || !slices.Contains(levels, any("gvisor")) || iso["default"] != "container" {
		t.Fatalf("/v1/info isolation: %d %s", status, data)
	}
	if _, data := d.call(t, "GET", "/v1/info", "kb", nil); mustJSON(t, data)["isolation"].(map[string]any)["default"] != "gvisor" {
		t.Errorf("/v1/info for a user whose minimum is gvisor: %s", data)
	}

	id := createRaw(t, d, "ka", map[string]any{"template": "host", "isolation": "gvisor"})
	status, data = d.call(t, "GET", "/v1/sandboxes/"+id, "ka", nil)
	if status != 200 || mustJSON(t, data)["isolation"] != "gvisor" {
		t.Fatalf("get gvisor sandbox: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "ka",
		map[string]any{"cmd": []string{"/bin/sh", "-c", "uname -r; python3 -c 'print(1)'; id -u"}}, "Accept", "application/json")
	m := mustJSON(t, data)
	out, _ := m["stdout"].(string)
	if status != 200 || m["exit_code"] != float64(0) || !strings.Contains(out, "gvisor") || !strings.HasSuffix(out, "\n1\n1000\n") {
		t.Fatalf("exec in a gVisor sandbox: %d %s", status, data)
	}
	// A file written through the API reads back through exec.
	if status, data := d.call(t, "PUT", "/v1/sandboxes/"+id+"/files?path=/workspace/note.txt", "ka", "from the API"); status/100 != 2 {
		t.Fatalf("write file: %d %s", status, data)
	}
	_, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "ka", map[string]any{"cmd": []string{"cat", "/workspace/note.txt"}}, "Accept", "application/json")
	if mustJSON(t, data)["stdout"] != "from the API" {
		t.Errorf("file written through the API: %s", data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/pause", "ka", "", "Content-Type", "application/json"); status != http.StatusServiceUnavailable {
		t.Errorf("pause of a gVisor sandbox: %d %s, want 503", status, data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes", "ka", map[string]any{"template": "host", "isolation": "vm"}); status != http.StatusBadRequest {
		t.Errorf("create at an unknown level: %d %s, want 400", status, data)
	}

	// bob's minimum is gvisor.
	bobs := createRaw(t, d, "kb", map[string]any{"template": "host"})
	if _, data := d.call(t, "GET", "/v1/sandboxes/"+bobs, "kb", nil); mustJSON(t, data)["isolation"] != "gvisor" {
		t.Errorf("bob's sandbox naming no level: %s, want gvisor", data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes", "kb", map[string]any{"template": "host", "isolation": "container"}); status != http.StatusForbidden {
		t.Errorf("bob asking for the container level: %d %s, want 403", status, data)
	}
	for _, s := range []struct{ id, key string }{{id, "ka"}, {bobs, "kb"}} {
		if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+s.id, s.key, nil); status/100 != 2 {
			t.Errorf("delete: %d %s", status, data)
		}
	}
}
