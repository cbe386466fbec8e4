package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// oneTemplate resolves every name to a template that runs a service.
type oneTemplate struct{ t sandbox.Template }

func (o oneTemplate) Resolve(ctx context.Context, ref string) (sandbox.Template, error) {
	return o.t, nil
}

// TestCreateServiceOff: "service": false creates the sandbox without its
// template's service; left out (or true) the service goes to the backend;
// anything but a boolean is refused.
func TestCreateServiceOff(t *testing.T) {
	tmpl := sandbox.Template{Ref: "web:1", Digest: "sha256:w", Kind: sandbox.TemplateImage, Layers: []string{"/store/layers/a"},
		Config: sandbox.ImageConfig{StartCmd: []string{"python3", "-m", "http.server", "8080"}, ReadyPort: 8080}}
	b := fake.New(testutil.AgentBinary(t), t.TempDir())
	t.Cleanup(func() { b.Close() })
	var mu sync.Mutex
	var services []*sandbox.Service
	errNoBoot := errors.New("not booted: the test only looks at the spec")
	b.CreateHook = func(ctx context.Context, s sandbox.Spec) error {
		mu.Lock()
		defer mu.Unlock()
		services = append(services, s.Service)
		if s.Service != nil {
			return errNoBoot // a fake sandbox runs no service to wait for
		}
		return nil
	}
	m := manager.New(manager.Config{Resolver: oneTemplate{tmpl}}, b, store.NewMemory())
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background(), true) })
	hs := httptest.NewServer(New(Config{}, m).Handler())
	t.Cleanup(hs.Close)

	post := func(body string) int {
		resp, err := hs.Client().Post(hs.URL+"/v1/sandboxes", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := post(`{"template":"web:1","service":false}`); status != http.StatusCreated {
		t.Fatalf("service false: %d", status)
	}
	post(`{"template":"web:1"}`)
	post(`{"template":"web:1","service":true}`)
	mu.Lock()
	got := services
	mu.Unlock()
	if len(got) != 3 || got[0] != nil || got[1] == nil || got[1].Cmd[0] != "python3" || got[2] == nil {
		t.Fatalf("services the backend got: %+v", got)
	}
	if status := post(`{"template":"web:1","service":"off"}`); status != http.StatusBadRequest {
		t.Errorf("service \"off\": %d, want 400", status)
	}
}
