package manager

import (
	"testing"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// levelsBackend claims the isolation levels it is given (only
// Capabilities is called by isolationFor).
type levelsBackend struct {
	backend.Backend
	levels []sandbox.Isolation
}

func (b levelsBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: b.levels}
}

// TestIsolationFor: the request's level, else the template's or type's
// (TEMPLATE_ISOLATION), else DEFAULT_ISOLATION; raised to the owner's
// minimum (ISOLATION_BY_USER), a weaker request refused as forbidden, a
// level the backend lacks refused as invalid.
func TestIsolationFor(t *testing.T) {
	both := []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor}
	m := &Manager{backend: levelsBackend{levels: both}, cfg: Config{
		TemplateIsolation: map[string]sandbox.Isolation{"secure": sandbox.IsolationGVisor, "base": sandbox.IsolationGVisor},
		IsolationByUser:   map[string]sandbox.Isolation{"bob": sandbox.IsolationGVisor},
	}}
	cases := []struct {
		owner, ref, typ string
		asked, want     sandbox.Isolation
		class           sandbox.Class
	}{
		{owner: "alice", ref: "host", want: sandbox.IsolationContainer},
		{owner: "alice", ref: "secure", want: sandbox.IsolationGVisor},
		{owner: "alice", ref: "host", typ: "base", want: sandbox.IsolationGVisor}, // an agentscope type
		{owner: "alice", ref: "secure", asked: sandbox.IsolationContainer, want: sandbox.IsolationContainer},
		{owner: "bob", ref: "host", want: sandbox.IsolationGVisor},
		{owner: "bob", ref: "host", asked: sandbox.IsolationContainer, class: sandbox.ClassForbidden},
		{owner: "bob", ref: "host", asked: sandbox.IsolationGVisor, want: sandbox.IsolationGVisor},
	}
	for _, c := range cases {
		got, err := m.isolationFor(c.owner, c.ref, c.typ, c.asked)
		if c.class != "" {
			if sandbox.ClassOf(err) != c.class {
				t.Errorf("%+v: %v, want class %s", c, err, c.class)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: got %q %v, want %q", c, got, err, c.want)
		}
	}
	if got := m.DefaultIsolation("bob"); got != sandbox.IsolationGVisor {
		t.Errorf("bob's default: %q", got)
	}

	m.backend = levelsBackend{} // container only
	m.cfg.DefaultIsolation = sandbox.IsolationGVisor
	if _, err := m.isolationFor("alice", "host", "", ""); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("DEFAULT_ISOLATION=gvisor on a backend without it: %v, want class %s", err, sandbox.ClassInvalid)
	}
}

func TestIsolationMapSetting(t *testing.T) {
	var m IsolationMap
	if err := m.UnmarshalText([]byte(`{"alice":"gvisor","base":"container"}`)); err != nil || m["alice"] != sandbox.IsolationGVisor || m["base"] != sandbox.IsolationContainer {
		t.Fatalf("parse: %v %v", m, err)
	}
	for _, bad := range []string{`{"alice":"vm"}`, `{"alice":""}`, `[1]`, `{"":"gvisor"}`} {
		if err := m.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if err := m.UnmarshalText(nil); err != nil || m != nil {
		t.Errorf("empty: %v %v", m, err)
	}
}
