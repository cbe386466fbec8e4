package e2b

import (
	"net/http"
	"strings"
	"testing"
)

// TestCreateIsolationMetadata: the metadata entry agentbox.isolation
// names the level of an E2B create. This server (the fake backend) has
// the container level only: container is created, gvisor refused as
// unavailable here, a level that does not exist refused as invalid.
func TestCreateIsolationMetadata(t *testing.T) {
	hs := newTestServer(t)
	sb := create(t, hs, keyAlice, `{"templateID":"base","metadata":{"agentbox.isolation":"container"}}`)
	call(t, hs, "DELETE", "/sandboxes/"+sb.SandboxID, "", "X-API-Key", keyAlice)
	r := call(t, hs, "POST", "/sandboxes", `{"templateID":"base","metadata":{"agentbox.isolation":"gvisor"}}`, "X-API-Key", keyAlice)
	wantError(t, "create at gvisor where it is not available", r, http.StatusBadRequest)
	if !strings.Contains(string(r.body), "not available") {
		t.Errorf("refusal of an unavailable level does not say so: %s", r.body)
	}
	r = call(t, hs, "POST", "/sandboxes", `{"templateID":"base","metadata":{"agentbox.isolation":"vm"}}`, "X-API-Key", keyAlice)
	wantError(t, "create at an unknown level", r, http.StatusBadRequest)
}
