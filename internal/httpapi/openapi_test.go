package httpapi

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/api/spectest"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/store"
)

// specPaths returns api/openapi.yaml's paths and their methods.
func specPaths(t *testing.T) map[string][]string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("api/openapi.yaml does not parse: %v", err)
	}
	out := map[string][]string{}
	for path, ops := range doc.Paths {
		for m := range ops {
			switch m {
			case "get", "put", "post", "delete", "patch", "head", "options":
				out[path] = append(out[path], strings.ToUpper(m))
			}
		}
	}
	return out
}

// fullServer is the API with every optional route family registered, as
// the daemon wires it.
func fullServer(t *testing.T) *Server {
	t.Helper()
	s := New(Config{}, manager.New(manager.Config{}, nil, store.NewMemory()))
	s.RegisterTools(mcpserver.NewHTTP(mcpserver.HTTPConfig{}))
	s.RegisterBootstrap(BootstrapConfig{})
	s.RegisterBuilds(BuildConfig{})
	if len(s.patterns) < 20 {
		t.Fatalf("only %d routes recorded", len(s.patterns))
	}
	return s
}

var (
	wildcard    = regexp.MustCompile(`\{([a-z_]+)(\.\.\.)?\}`)
	exactSuffix = "{$}"
)

// TestEveryRouteIsDocumented keeps api/openapi.yaml (served to users and
// the source of docs/api.md) in step with the routes actually served:
// every /v1 route the server registers is a path of the document with its
// method (a route for every method needs one documented).
func TestEveryRouteIsDocumented(t *testing.T) {
	paths := specPaths(t)
	for _, p := range fullServer(t).patterns {
		if p == "/v1/" {
			continue // the catch-all: a JSON 404
		}
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "", p
		}
		path = wildcard.ReplaceAllString(strings.TrimSuffix(path, exactSuffix), "{$1}")
		methods, ok := paths[path]
		switch {
		case !ok:
			t.Errorf("route %s is not in api/openapi.yaml", p)
		case method == "" && len(methods) == 0:
			t.Errorf("route %s (every method): no method documented", p)
		case method != "" && !slices.Contains(methods, method):
			t.Errorf("route %s: method not documented", p)
		}
	}
}

// TestEveryOperationIsServed is the other way round: every operation of
// the document reaches a route of its own (not the /v1 catch-all, not a
// 405), with its path parameters filled in.
func TestEveryOperationIsServed(t *testing.T) {
	s := fullServer(t)
	values := map[string]string{"id": "sb1", "port": "8080", "path": "x", "ctx": "c1", "name": "n1", "session_id": "s1", "webhook": "wh1", "delivery": "d1"}
	paths := specPaths(t)
	if len(paths) < 20 {
		t.Fatalf("only %d paths in the document", len(paths))
	}
	for path, methods := range paths {
		url := wildcard.ReplaceAllStringFunc(path, func(w string) string {
			v, ok := values[strings.Trim(w, "{}.")]
			if !ok {
				t.Fatalf("%s: no test value for %s", path, w)
			}
			return v
		})
		for _, m := range methods {
			req := httptest.NewRequest(m, url, nil)
			_, pattern := s.mux.Handler(req)
			if pattern == "" || pattern == "/v1/" {
				t.Errorf("%s %s is documented but not served (pattern %q)", m, path, pattern)
			}
		}
	}
}

var specValidator = sync.OnceValues(func() (*spectest.Validator, error) { return spectest.New(api.OpenAPI) })

// specClient is an http.Client over base (nil: the default transport)
// whose exchanges with the native API are checked against
// api/openapi.yaml (api/spectest); a violation fails t.
func specClient(t *testing.T, base http.RoundTripper) *http.Client {
	t.Helper()
	v, err := specValidator()
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: v.Transport(base, func(x spectest.Violation) {
		t.Errorf("not as api/openapi.yaml says: %s", x)
	})}
}
