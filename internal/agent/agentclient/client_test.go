package agentclient_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestUnreachableAgentIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := agentclient.New(agentclient.Endpoint{Network: "unix", Address: filepath.Join(t.TempDir(), "none.sock")}, "")
	defer c.Close()
	if err := c.Health(ctx); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("health: %v", err)
	}
	if _, err := c.Start(ctx, agentclient.StartOptions{Cmd: "true"}); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("start: %v", err)
	}
	if _, err := c.Stat(ctx, "/", ""); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("stat: %v", err)
	}
}

func TestAgentGoneMidStream(t *testing.T) {
	a := agenttest.Start(t, agenttest.Options{})
	c := a.Client(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Start(ctx, agentclient.StartOptions{Cmd: "sleep", Args: []string{"1000"}})
	if err != nil {
		t.Fatal(err)
	}
	a.Stop(t)
	// The agent terminates the process on SIGTERM, so the stream either
	// delivers the end or breaks; it must not hang.
	if _, err := p.Wait(); err != nil && sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("wait after the agent stopped: %v", err)
	}
	if _, err := c.List(ctx); sandbox.ClassOf(err) != sandbox.ClassUnavailable {
		t.Errorf("list after the agent stopped: %v", err)
	}
}

func TestDeadlineIsTimeout(t *testing.T) {
	a := agenttest.Start(t, agenttest.Options{})
	c := a.Client(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Run(ctx, agentclient.StartOptions{Cmd: "sleep", Args: []string{"1000"}}, nil, nil, nil)
	if sandbox.ClassOf(err) != sandbox.ClassTimeout {
		t.Errorf("run past its deadline: %v", err)
	}
	// Run killed the process on its way out.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	for {
		list, err := c.List(ctx2)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			break
		}
		if ctx2.Err() != nil {
			t.Fatalf("process survived Run's deadline: %+v", list)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
