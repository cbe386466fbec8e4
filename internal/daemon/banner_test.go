package daemon

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/fake"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/testutil"
)

// startFake runs the daemon on the fake backend with settings, on a
// loopback port, and returns its URL, its banner and its log once it is
// ready; the daemon stops when the test ends.
func startFake(t *testing.T, settings map[string]string) (url string, banner string, logs *testutil.SyncBuffer) {
	t.Helper()
	dir := t.TempDir()
	settings["AGENTBOX_DATA_DIR"] = filepath.Join(dir, "data")
	cfg, err := config.Load("", nil, settings)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs = &testutil.SyncBuffer{}
	var out testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, Backend: fake.New("/nonexistent/agent", filepath.Join(dir, "fake")),
			Logger: slog.New(slog.NewTextHandler(logs, nil)), Listener: ln, Ready: ready, Banner: &out})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return "http://" + addr, out.String(), logs
	case err := <-done:
		done <- err
		t.Fatalf("daemon did not start: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon not ready in 30s\n%s", logs.String())
	}
	return "", "", nil
}

func get(t *testing.T, url string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestStartBanner: a started daemon prints where to go (API and console
// URLs, how to sign in), its data dir, backend, types and templates,
// networking, pools and a next command, and logs the same as one record.
func TestStartBanner(t *testing.T) {
	url, banner, logs := startFake(t, map[string]string{"POOL_SIZE": "1", "DEFAULT_SANDBOX_TYPE": "base"})
	for _, want := range []string{
		"API         " + url + "\n",
		"console     " + url + "/\n",
		"auth        off (no API key; loopback only)",
		"sign in     leave the API key empty",
		"backends    fake\n",
		"types       base (host), filesystem (host)\n",
		"not built   browser, gui (desktop) — make templates builds them",
		"templates   host\n",
		"network     loopback only (the fake backend)\n",
		"pools       1 warm per type: base\n",
		"next        agentbox run --url " + url + " --template base -- uname -a\n",
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	t.Logf("banner:\n%s", banner)
	if !strings.Contains(banner, "data dir    /") {
		t.Errorf("banner lacks an absolute data dir:\n%s", banner)
	}
	l := logs.String()
	for _, want := range []string{`msg="agentbox started"`, "api_url=" + url, "console_url=" + url + "/", `types_not_built="[browser gui (desktop)]"`} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %s:\n%s", want, l)
		}
	}
}

// TestKeylessServerMarksKeys: a keyless server answers requests that carry
// a key (the unmodified E2B SDK always sends one) and says on each answer
// that the key was not checked, logging it once; a server with keys has no
// such header and refuses a wrong key.
func TestKeylessServerMarksKeys(t *testing.T) {
	url, _, logs := startFake(t, map[string]string{})
	plain := get(t, url+"/v1/sandboxes")
	if plain.StatusCode != 200 || plain.Header.Get(AuthHeader) != "off" || plain.Header.Get("Warning") != "" {
		t.Fatalf("no key: %d, %s %q, Warning %q", plain.StatusCode, AuthHeader, plain.Header.Get(AuthHeader), plain.Header.Get("Warning"))
	}
	for _, h := range [][]string{{"Authorization", "Bearer anything"}, {"X-API-Key", "e2b_00000000000000000000000000000000"}} {
		for _, path := range []string{"/v1/sandboxes", "/sandboxes"} {
			resp := get(t, url+path, h...)
			if resp.StatusCode != 200 || resp.Header.Get(AuthHeader) != "off" || !strings.Contains(resp.Header.Get("Warning"), "the API key sent was not checked") {
				t.Errorf("%s with %s: %d, %s %q, Warning %q", path, h[0], resp.StatusCode, AuthHeader, resp.Header.Get(AuthHeader), resp.Header.Get("Warning"))
			}
		}
	}
	if n := strings.Count(logs.String(), "a client sent an API key, but this server has none configured"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}

	keyed, banner, _ := startFake(t, map[string]string{"API_KEYS": "k1:alice"})
	if !strings.Contains(banner, "auth        API keys (1)") || !strings.Contains(banner, "AGENTBOX_API_KEY=<key> agentbox run") {
		t.Errorf("keyed banner:\n%s", banner)
	}
	if r := get(t, keyed+"/v1/sandboxes", "Authorization", "Bearer k1"); r.StatusCode != 200 || r.Header.Get(AuthHeader) != "" {
		t.Errorf("keyed, right key: %d, %s %q", r.StatusCode, AuthHeader, r.Header.Get(AuthHeader))
	}
	if r := get(t, keyed+"/v1/sandboxes", "Authorization", "Bearer wrong"); r.StatusCode != 401 {
		t.Errorf("keyed, wrong key: %d", r.StatusCode)
	}
}

// TestBannerNetworking: the banner names the bridge and subnet, or why
// sandboxes have loopback only.
func TestBannerNetworking(t *testing.T) {
	var b bytes.Buffer
	PrintBanner(&b, StartInfo{Addr: "0.0.0.0:9000", Keys: 2, Bridge: "agentbox1", Subnet: "10.89.0.0/16"})
	for _, want := range []string{"API         http://127.0.0.1:9000\n", "network     egress through bridge agentbox1, subnet 10.89.0.0/16\n",
		"pools       none (POOL_SIZE=0", "next        AGENTBOX_API_KEY=<key> agentbox run --url http://127.0.0.1:9000 --template host"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	PrintBanner(&b, StartInfo{Addr: "127.0.0.1:8000", NetworkOff: "NETWORK=auto: nft: not found"})
	if !strings.Contains(b.String(), "network     loopback only (NETWORK=auto: nft: not found)\n") {
		t.Errorf("banner:\n%s", b.String())
	}
}
