package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOpenIDE: --ide asks the server for a preview token of the
// code-server port (--jupyter of the data-science notebook's) and prints the browser link; without a preview domain
// (only the inert path form) it refuses; --port asks for any port; the
// flags are checked.
func TestOpenIDE(t *testing.T) {
	var ports []int
	domain := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes/sb1/preview-tokens" {
			http.Error(w, `{"error":{"code":"not_found","message":"no"}}`, http.StatusNotFound)
			return
		}
		var body struct{ Port int }
		_ = json.NewDecoder(r.Body).Decode(&body)
		ports = append(ports, body.Port)
		ans := map[string]any{"token": "tok", "path": "/v1/sandboxes/sb1/ports/13337/?agentbox_token=tok"}
		if domain {
			ans["url"] = "http://13337-sb1.localhost:8000/?agentbox_token=tok"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(ans)
	}))
	defer srv.Close()

	r := runCLI(t, srv.URL, "", "open", "sb1", "--ide")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "http://13337-sb1.localhost:8000/?agentbox_token=tok" {
		t.Errorf("open --ide: exit %d %q %s", r.code, r.stdout, r.msg)
	}
	if r = runCLI(t, srv.URL, "", "open", "sb1", "--port", "3000"); r.code != 0 {
		t.Errorf("open --port: exit %d %s", r.code, r.msg)
	}
	if r = runCLI(t, srv.URL, "", "open", "sb1", "--jupyter"); r.code != 0 {
		t.Errorf("open --jupyter: exit %d %s", r.code, r.msg)
	}
	if len(ports) != 3 || ports[0] != codeServerPort || ports[1] != 3000 || ports[2] != jupyterPort {
		t.Errorf("ports asked for: %v", ports)
	}
	domain = false
	if r = runCLI(t, srv.URL, "", "open", "sb1", "--ide"); r.code == 0 || !strings.Contains(r.msg, "PREVIEW_DOMAIN") {
		t.Errorf("open --ide without a preview domain: exit %d %q", r.code, r.msg)
	}
	if r = runCLI(t, srv.URL, "", "open", "sb1", "--jupyter"); r.code == 0 || !strings.Contains(r.msg, "Jupyter") {
		t.Errorf("open --jupyter without a preview domain: exit %d %q", r.code, r.msg)
	}
	for _, args := range [][]string{{"open", "sb1"}, {"open", "sb1", "--ide", "--port", "1"}, {"open", "sb1", "--ide", "--jupyter"}, {"open", "sb1", "--jupyter", "--port", "2"}} {
		if r = runCLI(t, srv.URL, "", args...); r.code == 0 {
			t.Errorf("%v: exit 0, want an error", args)
		}
	}
}
