package fake

import (
	"os"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// TestConformance runs the backend conformance suite against the fake, so
// what the layers above are tested with behaves as the real backends do
// (and claims no capability it lacks). The fake keeps its sandboxes in
// memory: a "restarted" fake over the same state dir is the same
// instance, which Recover then reports.
func TestConformance(t *testing.T) {
	agent := testutil.AgentBinary(t)
	for name, tmpl := range map[string]sandbox.Template{
		"host": sandbox.HostTemplate(),
		"dir":  {Ref: t.TempDir(), Kind: sandbox.TemplateDir},
	} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			byDir := map[string]*Backend{}
			backendtest.Run(t, backendtest.Harness{
				New: func(t *testing.T, dir string) backend.Backend {
					mu.Lock()
					defer mu.Unlock()
					if b, ok := byDir[dir]; ok {
						return b
					}
					b := New(agent, dir)
					byDir[dir] = b
					t.Cleanup(func() {
						if err := b.Close(); err != nil {
							t.Errorf("close: %v", err)
						}
					})
					return b
				},
				StateDir:   func(t *testing.T) string { return testutil.ShortTempDir(t) },
				Template:   tmpl,
				Abandon:    func(backend.Backend) {},
				Unisolated: true,
				RootDir:    func(b backend.Backend, id sandbox.ID) string { return b.(*Backend).RootDir(id) },
			})
		})
	}
}
