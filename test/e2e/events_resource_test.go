package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestResourceEvents: the events of what is not a sandbox's state — a
// volume made and deleted, a sandbox forked — are recorded with who did
// it, are the owner's only, and carry what they are about; E2B's event
// list (sandboxes only) leaves the volume events out.
func TestResourceEvents(t *testing.T) {
	const alice, bob = "re-a", "re-b"
	d := startDaemon(t, "API_KEYS="+alice+":alice,"+bob+":bob", "POOL_SIZE=0")
	if status, data := d.call(t, "POST", "/v1/volumes", alice, map[string]any{"name": "evvol", "size": "64M"}); status != http.StatusCreated {
		t.Fatalf("create volume: %d %s", status, data)
	}
	if status, data := d.call(t, "DELETE", "/v1/volumes/evvol", alice, nil); status != http.StatusNoContent {
		t.Fatalf("delete volume: %d %s", status, data)
	}
	src := createRaw(t, d, alice, map[string]any{})
	status, data := d.call(t, "POST", "/v1/sandboxes/"+src+"/fork", alice, map[string]any{"count": 2})
	if status != http.StatusCreated {
		t.Fatalf("fork: %d %s", status, data)
	}
	var forks []string
	for _, f := range mustJSON(t, data)["sandboxes"].([]any) {
		forks = append(forks, f.(map[string]any)["id"].(string))
	}

	type event struct {
		Type      string         `json:"type"`
		SandboxID string         `json:"sandbox_id"`
		Owner     string         `json:"owner"`
		Cause     map[string]any `json:"cause"`
		Data      map[string]any `json:"data"`
	}
	read := func(key, query string) []event {
		status, data := d.call(t, "GET", "/v1/events?limit=1000"+query, key, nil)
		if status != 200 {
			t.Fatalf("events: %d %s", status, data)
		}
		var page struct {
			Events []event `json:"events"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			t.Fatal(err)
		}
		return page.Events
	}
	// Events are written in the background: wait (bounded) for the fork's.
	var evs []event
	for i := 0; ; i++ {
		evs = read(alice, "")
		if slices.ContainsFunc(evs, func(e event) bool { return e.Type == "forked" }) {
			break
		}
		if i == 100 {
			t.Fatalf("no forked event after 10 s: %+v", evs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	find := func(typ string) event {
		for _, e := range evs {
			if e.Type == typ {
				return e
			}
		}
		t.Fatalf("no %s event among %+v", typ, evs)
		return event{}
	}
	for _, typ := range []string{"volume_created", "volume_deleted"} {
		e := find(typ)
		if e.SandboxID != "" || e.Owner != "alice" || e.Data["volume"] != "evvol" || e.Cause["kind"] != "api" || e.Cause["by"] != "alice" {
			t.Errorf("%s: %+v", typ, e)
		}
	}
	if e := find("volume_created"); e.Data["size_bytes"] == nil || e.Data["kind"] != "local" {
		t.Errorf("volume_created data: %+v", e.Data)
	}
	fe := find("forked")
	got, _ := fe.Data["forks"].([]any)
	if fe.SandboxID != src || len(got) != 2 || !slices.Contains(got, any(forks[0])) || !slices.Contains(got, any(forks[1])) {
		t.Errorf("forked: %+v, want sandbox %s and forks %v", fe, src, forks)
	}
	if typed := read(alice, "&type=volume_created"); len(typed) != 1 || typed[0].Type != "volume_created" {
		t.Errorf("type filter: %+v", typed)
	}
	if other := read(bob, ""); len(other) != 0 {
		t.Errorf("bob sees alice's events: %+v", other)
	}
	// E2B's list is sandboxes' events: no volume ones.
	status, data = d.call(t, "GET", "/events/sandboxes?limit=100", "", nil, "X-API-Key", alice)
	if status != 200 {
		t.Fatalf("e2b events: %d %s", status, data)
	}
	var e2b []map[string]any
	if err := json.Unmarshal(data, &e2b); err != nil {
		t.Fatal(err)
	}
	if len(e2b) == 0 {
		t.Fatal("E2B's list is empty")
	}
	for _, e := range e2b {
		if e["sandboxId"] == "" {
			t.Errorf("E2B's list has an event of no sandbox: %v", e)
		}
	}
	for _, id := range append(forks, src) {
		deleteSandbox(t, d, alice, id)
	}
}
