package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentbox/agentbox/client"
)

func TestAuthHeaderAndUserAgent(t *testing.T) {
	fs, c, ctx := setup(t, client.WithAPIKey("s3cret"), client.WithUserAgent("test-agent/1"))
	fs.SetAPIKey("s3cret")
	if _, err := c.Create(ctx, client.CreateRequest{}); err != nil {
		t.Fatalf("create with the right key: %v", err)
	}
	h := fs.Headers()[0]
	if got := h.Get("Authorization"); got != "Bearer s3cret" {
		t.Errorf("Authorization = %q", got)
	}
	if got := h.Get("User-Agent"); got != "test-agent/1" {
		t.Errorf("User-Agent = %q", got)
	}

	anon, err := client.New(fs.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = anon.Create(ctx, client.CreateRequest{})
	if !client.IsUnauthenticated(err) {
		t.Fatalf("create without key: got %v, want unauthenticated", err)
	}
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.RequestID == "" {
		t.Errorf("error = %#v, want status 401 with a request id", apiErr)
	}
}

func TestErrorsAreTyped(t *testing.T) {
	cases := []struct {
		status      int
		code, field string
		is          func(error) bool
		sentinel    error
	}{
		{404, client.CodeNotFound, "", client.IsNotFound, client.ErrNotFound},
		{409, client.CodeConflict, "", client.IsConflict, client.ErrConflict},
		{429, client.CodeQuotaExceeded, "", client.IsQuota, client.ErrQuotaExceeded},
		{401, client.CodeUnauthenticated, "", client.IsUnauthenticated, client.ErrUnauthenticated},
		{400, client.CodeInvalidArgument, "resources.memory", client.IsInvalidArgument, client.ErrInvalidArgument},
		{413, client.CodeTooLarge, "", client.IsTooLarge, client.ErrTooLarge},
		{507, client.CodeInsufficientSpace, "", client.IsInsufficientSpace, client.ErrInsufficientSpace},
	}
	// Statuses GET /v1/sandboxes/{id} never answers: not checked against
	// api/openapi.yaml.
	fs, c, ctx := setup(t, client.WithHTTPClient(&http.Client{}))
	for _, tc := range cases {
		t.Run(tc.code, func(t *testing.T) {
			fs.FailNext(tc.status, tc.code, "it went wrong", tc.field)
			_, err := c.Get(ctx, "whatever")
			if !tc.is(err) || !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want code %s", err, tc.code)
			}
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not *client.Error", err)
			}
			if e.Status != tc.status || e.Code != tc.code || e.Message != "it went wrong" || e.Field != tc.field || e.RequestID == "" {
				t.Errorf("error = %+v", e)
			}
			if tc.field != "" && e.Error() != "it went wrong (field "+tc.field+")" {
				t.Errorf("Error() = %q", e.Error())
			}
			if client.IsNotFound(err) != (tc.code == client.CodeNotFound) {
				t.Errorf("IsNotFound matched code %s", tc.code)
			}
		})
	}
}

func TestErrorFromNonJSONBody(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer ts.Close()
	c, _ := client.New(ts.URL)
	_, err := c.Info(t.Context())
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeUnavailable || e.Status != 502 {
		t.Fatalf("got %#v", err)
	}
}

func TestNetworkErrorsAreWrapped(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close() // nothing listens there any more
	c, _ := client.New(url)
	_, err := c.Get(t.Context(), "abc")
	if err == nil || errors.As(err, new(*client.Error)) {
		t.Fatalf("got %v, want a transport error", err)
	}
	if want := "get sandbox abc: "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("error %q lacks the operation", err)
	}
}

func TestNewValidatesURL(t *testing.T) {
	for _, u := range []string{"ftp://x", "127.0.0.1:8000", "http://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	c, err := client.New("http://example.test:1234/prefix/")
	if err != nil || c.BaseURL() != "http://example.test:1234/prefix" {
		t.Errorf("BaseURL = %v, %v", c.BaseURL(), err)
	}
}

func TestFromEnv(t *testing.T) {
	fs, _, ctx := setup(t)
	fs.SetAPIKey("envkey")
	t.Setenv(client.EnvURL, fs.URL)
	t.Setenv(client.EnvAPIKey, "envkey")
	c, err := client.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("info with env key: %v", err)
	}
	t.Setenv(client.EnvURL, "")
	c, _ = client.FromEnv()
	if c.BaseURL() != client.DefaultURL {
		t.Errorf("default URL = %s", c.BaseURL())
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512M": 512 << 20, "1g": 1 << 30, "64KiB": 64 << 10,
		"1048576": 1 << 20, "1.5G": 3 << 29, "2 MB": 2 << 20} {
		if got, err := client.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "-1M", "abc", "1X", fmt.Sprint(1e30)} {
		if _, err := client.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}
