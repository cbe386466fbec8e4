package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// bigEnv returns n environment variables of size bytes each.
func bigEnv(n, size int) map[string]string {
	env := map[string]string{}
	for i := 0; i < n; i++ {
		env[fmt.Sprintf("BIG_%d", i)] = strings.Repeat("x", size)
	}
	return env
}

// TestSecurityStateNotFillableByOneTenant: with the default settings, one
// tenant creating sandboxes with the largest environment the API accepts,
// as many as it is allowed, cannot make another tenant's create fail (the
// sandbox state lives on a small tmpfs shared by everyone).
func TestSecurityStateNotFillableByOneTenant(t *testing.T) {
	const aliceKey, bobKey = "alice-key-state", "bob-key-state"
	// The tenant limit is what is under test, not the host's free disk:
	// 20 sandboxes of the default disk size must not hit disk admission
	// first on a host with little space (their disks stay empty here).
	d := startDaemon(t, "API_KEYS="+aliceKey+":alice,"+bobKey+":bob", "DISK_OVERCOMMIT=100")

	var alice []string
	defer func() {
		for _, id := range alice {
			d.call(t, "DELETE", "/v1/sandboxes/"+id, aliceKey, nil)
		}
	}()
	// First an environment of almost 2 MiB (what the kernel still passes to
	// a process), then smaller ones down to none, each until refused.
	for _, env := range []map[string]string{bigEnv(15, 120<<10), bigEnv(2, 120<<10), bigEnv(1, 8<<10), nil} {
		for i := 0; i < 60; i++ {
			status, data := d.call(t, "POST", "/v1/sandboxes", aliceKey, map[string]any{"env": env})
			if status == 201 || status == 200 {
				id, _ := mustJSON(t, data)["id"].(string)
				alice = append(alice, id)
				continue
			}
			code, _ := mustJSON(t, data)["code"].(string)
			if status != 400 && status != 429 {
				t.Errorf("alice's create #%d refused with %d %s, want a clear 400 or 429", len(alice)+1, status, data)
			}
			t.Logf("alice refused after %d sandboxes: %d %s", len(alice), status, code)
			break
		}
	}
	status, data := d.call(t, "POST", "/v1/sandboxes", bobKey, map[string]any{"template": "host"})
	if status != 201 && status != 200 {
		t.Fatalf("bob's create failed after alice's %d sandboxes: %d %s", len(alice), status, data)
	}
	id, _ := mustJSON(t, data)["id"].(string)
	d.call(t, "DELETE", "/v1/sandboxes/"+id, bobKey, nil)
}
