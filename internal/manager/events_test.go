package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/store"
)

// The manager records each change with its cause: an owner's create and
// delete, a timeout, a crash of the agent, a daemon shutdown; pooled
// sandboxes nobody got record nothing.
func TestManagerEvents(t *testing.T) {
	el := events.New(events.Config{Store: store.NewMemory()})
	el.Start()
	defer el.Close(context.Background())
	e := newEnv(t, Config{Events: el, PoolTypes: []string{"base"}, PoolSize: 1})
	ctx := context.Background()
	a, err := e.m.Create(ctx, "alice", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete(ctx, "alice", a.ID); err != nil {
		t.Fatal(err)
	}
	short, err := e.m.Create(ctx, "alice", CreateRequest{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	crash, err := e.m.Create(ctx, "bob", CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.b.Crash(crash.ID); err != nil {
		t.Fatal(err)
	}
	last, err := e.m.Create(ctx, "bob", CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	summary := func() string {
		p, _ := el.Query(ctx, events.Query{Limit: 1000})
		var b strings.Builder
		for _, ev := range p.Events {
			b.WriteString(ev.SandboxID + ":" + string(ev.Type) + "/" + string(ev.Cause.Kind) + "/" + ev.Cause.By + " ")
		}
		return b.String()
	}
	wants := []string{
		string(a.ID) + ":created/api/alice ", string(a.ID) + ":killed/api/alice ",
		string(short.ID) + ":created/api/alice ", string(short.ID) + ":expired/timeout/ ",
		string(crash.ID) + ":created/api/bob ", string(crash.ID) + ":stopped/agent_exit/ ",
		string(last.ID) + ":created/api/bob ",
	}
	has := func() bool {
		s := summary()
		for _, w := range wants {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	}
	waitFor(t, 10*time.Second, "the events", has)
	if err := e.m.Shutdown(ctx, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the shutdown's event", func() bool {
		return strings.Contains(summary(), string(last.ID)+":killed/daemon_shutdown/ ")
	})
	p, _ := el.Query(ctx, events.Query{Limit: 1000})
	for _, ev := range p.Events {
		if ev.Owner == "" {
			t.Fatalf("an event of a pooled sandbox nobody got: %+v", ev)
		}
	}
}

// TestTemplateBuildEvents: a build's end is an event of whoever built it:
// template_built with its tags, digest and steps, template_build_failed
// with the error; a delete is template_deleted; none names a sandbox.
func TestTemplateBuildEvents(t *testing.T) {
	el := events.New(events.Config{Store: store.NewMemory()})
	el.Start()
	defer el.Close(context.Background())
	e := newEnv(t, Config{Events: el})
	e.m.RecordTemplateBuild("ops", []string{"web:1"}, "sha256:abc", 4, 3, nil)
	e.m.RecordTemplateBuild("ops", []string{"web:2"}, "", 0, 0, errors.New("line 3: RUN exited with 1"))
	e.m.RecordTemplateDeleted("ops", "web:1")
	var got []events.Event
	for i := 0; i < 100 && len(got) < 3; i++ {
		page, err := el.Query(context.Background(), events.Query{Owner: "ops"})
		if err != nil {
			t.Fatal(err)
		}
		got = page.Events
		time.Sleep(10 * time.Millisecond)
	}
	if len(got) != 3 {
		t.Fatalf("events: %+v", got)
	}
	ok, failed, deleted := got[0], got[1], got[2]
	if deleted.Type != events.TemplateDeleted || deleted.Data["template"] != "web:1" || deleted.SandboxID != "" {
		t.Errorf("deleted: %+v", deleted)
	}
	if ok.Type != events.TemplateBuilt || ok.SandboxID != "" || ok.Cause.By != "ops" || ok.Data["digest"] != "sha256:abc" || fmt.Sprint(ok.Data["steps"]) != "4" || fmt.Sprint(ok.Data["cached"]) != "3" {
		t.Errorf("built: %+v", ok)
	}
	if failed.Type != events.TemplateBuildFailed || failed.Data["error"] != "line 3: RUN exited with 1" {
		t.Errorf("failed: %+v", failed)
	}
	if ok.Type.OfSandbox() || !events.Forked.OfSandbox() {
		t.Error("OfSandbox: template events are not a sandbox's, forked is")
	}
}
