package spectest

import (
	"encoding/json"
	"testing"

	"github.com/agentbox/agentbox/api"
)

func BenchmarkSandboxBody(b *testing.B) {
	v, err := New(api.OpenAPI)
	if err != nil {
		b.Fatal(err)
	}
	s := v.doc.Components.Schemas["Sandbox"].Value
	var val any
	json.Unmarshal([]byte(sandboxJSON), &val)
	for b.Loop() {
		if err := v.doc.ValidateSchemaJSON(s, val, v.schemaOpts...); err != nil {
			b.Fatal(err)
		}
	}
}
func BenchmarkExecEvent(b *testing.B) {
	v, err := New(api.OpenAPI)
	if err != nil {
		b.Fatal(err)
	}
	s := v.doc.Components.Schemas["ExecEvent"].Value
	var val any
	json.Unmarshal([]byte(`{"type":"stdout","data":"hello"}`), &val)
	for b.Loop() {
		if err := v.doc.ValidateSchemaJSON(s, val, v.schemaOpts...); err != nil {
			b.Fatal(err)
		}
	}
}
