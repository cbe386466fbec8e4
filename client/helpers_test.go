package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/fakeserver"
)

// setup starts a fake server and a client for it. Every test is bounded:
// the context ends after 20 s whatever happens.
func setup(t *testing.T, opts ...client.Option) (*fakeserver.Server, *client.Client, context.Context) {
	t.Helper()
	fs := fakeserver.New(t)
	c, err := client.New(fs.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return fs, c, ctx
}

// mustCreate creates a sandbox or fails the test.
func mustCreate(t *testing.T, ctx context.Context, c *client.Client) *client.Sandbox {
	t.Helper()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// eventually polls cond every 10 ms for at most 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
