package client_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/api/spectest"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/fakeserver"
)

var specValidator = sync.OnceValues(func() (*spectest.Validator, error) { return spectest.New(api.OpenAPI) })

// specClient is an http.Client whose exchanges with the native API are
// checked against api/openapi.yaml (api/spectest); a violation fails t.
// The fake server claims the document's wire shapes; this holds it to
// them, and the SDK's requests too.
func specClient(t *testing.T) *http.Client {
	t.Helper()
	v, err := specValidator()
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: v.Transport(nil, func(x spectest.Violation) {
		t.Errorf("not as api/openapi.yaml says: %s", x)
	})}
}

// setup starts a fake server and a client for it, whose exchanges are
// checked against api/openapi.yaml (an option WithHTTPClient replaces
// the check). Every test is bounded: the context ends after 20 s
// whatever happens.
func setup(t *testing.T, opts ...client.Option) (*fakeserver.Server, *client.Client, context.Context) {
	t.Helper()
	fs := fakeserver.New(t)
	c, err := client.New(fs.URL, append([]client.Option{client.WithHTTPClient(specClient(t))}, opts...)...)
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
