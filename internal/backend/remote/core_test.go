package remote

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

type testOwn struct {
	Template  string `json:"template"`
	EnvdToken string `json:"envd_token,omitempty"`
}

// A state file written before the core (one flat object) reads into a
// Box, and a Box writes the same flat object back.
func TestBoxStateFileFormat(t *testing.T) {
	old := `{"id":"sb1","remote_id":"r1","template":"base","envd_token":"tok","created_at":"2026-01-02T03:04:05Z","state":"running","resources":{},"labels":{"a":"b"}}`
	var b Box[testOwn]
	if err := json.Unmarshal([]byte(old), &b); err != nil {
		t.Fatal(err)
	}
	if b.ID != "sb1" || b.RemoteID != "r1" || b.State != sandbox.StateRunning || b.Labels["a"] != "b" || b.P.Template != "base" || b.P.EnvdToken != "tok" {
		t.Fatalf("read: %+v", b)
	}
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]any
	if err := json.Unmarshal(raw, &flat); err != nil {
		t.Fatalf("not one object: %s", raw)
	}
	for _, k := range []string{"id", "remote_id", "template", "envd_token", "state", "labels"} {
		if _, ok := flat[k]; !ok {
			t.Fatalf("%s missing from %s", k, raw)
		}
	}
}

// fakeProvider holds sandboxes in memory.
type fakeProvider struct {
	mu      sync.Mutex
	listed  []Listed
	removed []string
}

func (*fakeProvider) Validate(sandbox.Spec) error { return nil }
func (f *fakeProvider) Create(_ context.Context, spec sandbox.Spec, labels map[string]string) (Created[testOwn], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rid := "r-" + string(spec.ID)
	f.listed = append(f.listed, Listed{RemoteID: rid, Labels: labels, State: sandbox.StateRunning})
	return Created[testOwn]{RemoteID: rid, P: testOwn{Template: "t"}}, nil
}
func (f *fakeProvider) Remove(_ context.Context, rid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, rid)
	for i, l := range f.listed {
		if l.RemoteID == rid {
			f.listed = append(f.listed[:i], f.listed[i+1:]...)
			break
		}
	}
	return nil
}
func (f *fakeProvider) List(context.Context, map[string]string) ([]Listed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Listed(nil), f.listed...), nil
}
func (*fakeProvider) Renew(context.Context, string) error { return nil }
func (*fakeProvider) Template(*Box[testOwn]) sandbox.Template {
	return sandbox.Template{Ref: "fake:t", Kind: "fake"}
}
func (*fakeProvider) Endpoint(*Box[testOwn]) sandbox.Endpoint { return sandbox.Endpoint{} }

// A restarted core re-lists its boxes with the provider's state, drops
// the ones the provider lost and deletes the labelled ones it has no box
// of.
func TestCoreRecoverReconciles(t *testing.T) {
	dir := t.TempDir()
	f := &fakeProvider{}
	cfg := Config{Provider: "fake", Kind: "fake", StateDir: dir, Node: "n1", Lease: time.Hour}
	c, err := New[testOwn](cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []sandbox.ID{"a", "b"} {
		if _, err := c.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.Template{Kind: "fake"}}); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	f.listed[0].State = sandbox.StateStopped                                                            // a: stopped at the provider
	f.listed = f.listed[:1]                                                                             // b: lost
	f.listed = append(f.listed, Listed{RemoteID: "orphan", Labels: map[string]string{LabelNode: "n1"}}) // no box
	f.listed = append(f.listed, Listed{RemoteID: "other", Labels: map[string]string{LabelNode: "n2"}})  // another node's
	f.mu.Unlock()
	c2, err := New[testOwn](cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	infos, err := c2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].ID != "a" || infos[0].State != sandbox.StateStopped || infos[0].Spec.Template.Ref != "fake:t" {
		t.Fatalf("recovered: %+v", infos)
	}
	if len(f.removed) != 1 || f.removed[0] != "orphan" {
		t.Fatalf("removed at the provider: %v", f.removed)
	}
	if err := c2.Destroy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Box("a"); !sandbox.IsNotFound(err) {
		t.Fatalf("box after destroy: %v", err)
	}
}
