package manager

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestSetExtra: keys are set and removed, the rest kept, the change is
// stored, another owner's sandbox is unknown, and the data stays bounded.
func TestSetExtra(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	rec, err := e.m.Create(ctx, "alice", CreateRequest{Extra: map[string]string{"a": "1", "b": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.m.SetExtra(ctx, "alice", rec.ID, map[string]string{"a": "", "c": "3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Extra) != 2 || got.Extra["b"] != "2" || got.Extra["c"] != "3" {
		t.Fatalf("extra = %v", got.Extra)
	}
	if stored, _ := e.st.Get(ctx, rec.ID); stored.Extra["c"] != "3" || stored.Extra["a"] != "" {
		t.Fatalf("stored extra = %v", stored.Extra)
	}
	if _, err := e.m.SetExtra(ctx, "bob", rec.ID, map[string]string{"x": "y"}); !sandbox.IsNotFound(err) {
		t.Fatalf("bob: %v", err)
	}
	if _, err := e.m.SetExtra(ctx, "alice", rec.ID, map[string]string{"big": strings.Repeat("x", maxMapValueLen+1)}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("too long a value: %v", err)
	}
	if cur, _ := e.m.Get(ctx, "alice", rec.ID); cur.Extra["big"] != "" {
		t.Fatal("a refused change was kept")
	}
}
