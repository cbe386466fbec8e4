package httpapi

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/store"
)

// TestEveryRouteIsDocumented keeps api/openapi.yaml (served to users and
// the source of docs/api.md) in step with the routes actually served.
func TestEveryRouteIsDocumented(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("api/openapi.yaml does not parse: %v", err)
	}
	s := New(Config{}, manager.New(manager.Config{}, nil, store.NewMemory()))
	s.RegisterTools(mcpserver.NewHTTP(mcpserver.HTTPConfig{}))
	if len(s.patterns) < 20 {
		t.Fatalf("only %d routes recorded", len(s.patterns))
	}
	for _, p := range s.patterns {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			continue // the catch-all
		}
		path = strings.ReplaceAll(path, "...}", "}")
		ops, ok := doc.Paths[path]
		if !ok {
			t.Errorf("route %s is not in api/openapi.yaml", p)
			continue
		}
		if _, ok := ops[strings.ToLower(method)]; !ok {
			t.Errorf("route %s: method not documented", p)
		}
	}
}
