package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// sessionRecords returns the records of session key in the shared store.
func sessionRecords(t *testing.T, rs *store.Redis, key string) []*store.Record {
	t.Helper()
	recs, err := rs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []*store.Record
	for _, r := range recs {
		if r.SessionKey == key {
			out = append(out, r)
		}
	}
	return out
}

// sessionIDs maps a session's sandboxes by type.
func sessionIDs(s *client.Session) map[string]string {
	out := map[string]string{}
	for _, sb := range s.Sandboxes {
		out[sb.Type] = sb.ID
	}
	return out
}

// Native sessions span replicas: a connect through B finds the sandbox
// created through A, concurrent connects through A and B create one
// sandbox per type, a release through B destroys the sandboxes A runs, and
// another tenant's release of the same session name touches none of them.
func TestScaleOutSessions(t *testing.T) {
	_, rs, ds := startReplicas(t, 2, "CLUSTER_PLACEMENT=local", "POOL_SIZE=0")
	a, b := ds[0], ds[1]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ca, cb := a.sdk(t, "k1"), b.sdk(t, "k1")
	var created []string
	defer func() {
		for _, id := range created {
			_ = ca.Delete(context.Background(), id)
		}
	}()

	// Connect through A, then through B: B answers with A's sandbox.
	s1, err := ca.ConnectSession(ctx, "chat", client.ConnectSessionRequest{UserID: "u1"})
	if err != nil || len(s1.Sandboxes) != 1 {
		t.Fatalf("connect through A: %+v %v", s1, err)
	}
	onA := s1.Sandboxes[0].ID
	created = append(created, onA)
	if rec, err := rs.Get(ctx, sandbox.ID(onA)); err != nil || rec.Node != "r0" || rec.SessionKey != "chat_u1" {
		t.Fatalf("record of the session's sandbox: %+v %v", rec, err)
	}
	s2, err := cb.ConnectSession(ctx, "chat", client.ConnectSessionRequest{UserID: "u1", Types: []string{"base", "filesystem"}})
	if err != nil || len(s2.Sandboxes) != 2 {
		t.Fatalf("connect through B: %+v %v", s2, err)
	}
	ids := sessionIDs(s2)
	created = append(created, ids["filesystem"])
	if ids["base"] != onA {
		t.Fatalf("connect through B gave base sandbox %s, not A's %s", ids["base"], onA)
	}
	if rec, err := rs.Get(ctx, sandbox.ID(ids["filesystem"])); err != nil || rec.Node != "r1" {
		t.Fatalf("the missing type is created by B: %+v %v", rec, err)
	}
	// The sandbox B answered with is A's and works through B.
	if res, err := cb.Exec(ctx, onA, client.ExecRequest{Cmd: []string{"echo", "hi"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec through B in the session's sandbox on A: %+v %v", res, err)
	}

	// Another tenant with the same session and user names has its own
	// session: its release through B leaves alice's sandboxes alone.
	if rel, err := b.sdk(t, "k2").ReleaseSession(ctx, "chat", "u1"); err != nil || len(rel) != 0 {
		t.Fatalf("bob's release of his (empty) session: %v %v", rel, err)
	}
	if got := sessionRecords(t, rs, "chat_u1"); len(got) != 2 {
		t.Fatalf("alice's session after bob's release: %d records, want 2", len(got))
	}

	// Release through B: A's sandbox is destroyed by A, B's by B.
	rel, err := cb.ReleaseSession(ctx, "chat", "u1")
	if err != nil {
		t.Fatalf("release through B: %v", err)
	}
	slices.Sort(rel)
	want := []string{onA, ids["filesystem"]}
	slices.Sort(want)
	if !slices.Equal(rel, want) {
		t.Fatalf("released %v, want %v", rel, want)
	}
	if got := sessionRecords(t, rs, "chat_u1"); len(got) != 0 {
		t.Fatalf("records left after the release: %+v", got)
	}
	if _, err := ca.Get(ctx, onA); !client.IsNotFound(err) {
		t.Fatalf("A's sandbox after the release through B: %v, want not found", err)
	}
	if res, err := ca.Exec(ctx, onA, client.ExecRequest{Cmd: []string{"true"}}); !client.IsNotFound(err) {
		t.Fatalf("exec in A's released sandbox through A: %+v %v, want not found", res, err)
	}

	// Concurrent connects of one new session through A and B, a few
	// sessions at once: one sandbox per type in all, the same for both.
	const sessions = 3
	types := []string{"base", "filesystem"}
	var wg sync.WaitGroup
	got := make([][2]*client.Session, sessions)
	errs := make(chan error, 2*sessions)
	for i := 0; i < sessions; i++ {
		for j, c := range []*client.Client{ca, cb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := c.ConnectSession(ctx, fmt.Sprintf("race-%d", i), client.ConnectSessionRequest{Types: types})
				if err != nil {
					errs <- fmt.Errorf("connect race-%d through replica %d: %w", i, j, err)
					return
				}
				got[i][j] = s
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	for i := 0; i < sessions; i++ {
		key := fmt.Sprintf("race-%d", i)
		viaA, viaB := sessionIDs(got[i][0]), sessionIDs(got[i][1])
		for _, typ := range types {
			created = append(created, viaA[typ], viaB[typ])
			if viaA[typ] == "" || viaA[typ] != viaB[typ] {
				t.Errorf("%s type %s: %q through A, %q through B", key, typ, viaA[typ], viaB[typ])
			}
		}
		if recs := sessionRecords(t, rs, key); len(recs) != len(types) {
			t.Errorf("%s: %d sandboxes in the store, want %d", key, len(recs), len(types))
		}
		rel, err := ca.ReleaseSession(ctx, key, "")
		if err != nil || len(rel) != len(types) {
			t.Errorf("release %s through A: %v %v", key, rel, err)
		}
		if recs := sessionRecords(t, rs, key); len(recs) != 0 {
			t.Errorf("%s: %d records left after its release", key, len(recs))
		}
	}
}
