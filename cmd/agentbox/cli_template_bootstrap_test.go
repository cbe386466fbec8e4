package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// runBootstrapCLI runs `agentbox template bootstrap ...` in-process, with
// the command registered under a template group as the CLI wires it.
func runBootstrapCLI(t *testing.T, url string, args ...string) cliResult {
	t.Helper()
	root := &cobra.Command{Use: "agentbox", SilenceUsage: true, SilenceErrors: true}
	addClientFlags(root)
	group := &cobra.Command{Use: "template"}
	group.AddCommand(newTemplateBootstrapCmd())
	root.AddCommand(group)
	return execute(root, append([]string{"--url", url, "template", "bootstrap"}, args...))
}

// bootstrapAPI answers POST /v1/templates/bootstraps with events, recording
// the request.
func bootstrapAPI(t *testing.T, events ...string) (*httptest.Server, *client.BootstrapRequest) {
	got := &client.BootstrapRequest{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/templates/bootstraps" {
			http.NotFound(w, r)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(got); err != nil {
			t.Errorf("request body: %v", err)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, e := range events {
			w.Write([]byte(e + "\n"))
		}
	}))
	t.Cleanup(hs.Close)
	return hs, got
}

func TestTemplateBootstrapCLI(t *testing.T) {
	hs, got := bootstrapAPI(t,
		`{"status":"log","message":"I: running apt-get update..."}`,
		`{"status":"unpacking","layer":"sha256:ab","current":1,"total":2}`,
		`{"status":"done","template":{"name":"mydebian","tag":"base","kind":"image"}}`)
	res := runBootstrapCLI(t, hs.URL, "debian:bookworm", "-t", "mydebian:base", "--include", "git,curl", "--include", "sudo")
	if res.code != 0 || res.stdout != "mydebian:base\n" {
		t.Fatalf("exit %d %q, stdout %q, stderr %q", res.code, res.msg, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stderr, "I: running apt-get update...") || !strings.Contains(res.stderr, "unpacking sha256:ab 1/2") {
		t.Errorf("progress on stderr: %q", res.stderr)
	}
	if got.Image != "debian:bookworm" || got.Name != "mydebian:base" || !slices.Equal(got.Include, []string{"git", "curl", "sudo"}) {
		t.Errorf("request %+v", got)
	}

	res = runBootstrapCLI(t, hs.URL, "--json", "debian:bookworm")
	var tmpl map[string]any
	if res.code != 0 || json.Unmarshal([]byte(res.stdout), &tmpl) != nil || tmpl["name"] != "mydebian" || res.stderr != "" {
		t.Errorf("--json: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

func TestTemplateBootstrapCLIFailures(t *testing.T) {
	hs, _ := bootstrapAPI(t, `{"status":"log","message":"E: Unable to locate package nosuch"}`, `{"status":"error","error":"mmdebstrap: exit status 1"}`)
	res := runBootstrapCLI(t, hs.URL, "debian:bookworm", "--include", "nosuch")
	if res.code != 1 || !strings.Contains(res.msg, "exit status 1") || !strings.Contains(res.stderr, "Unable to locate package") {
		t.Errorf("error event: exit %d %q, stderr %q", res.code, res.msg, res.stderr)
	}
	// A stream that stops before the end is an error, not a success.
	hs, _ = bootstrapAPI(t, `{"status":"log","message":"I: downloading"}`)
	if res := runBootstrapCLI(t, hs.URL, "debian:bookworm"); res.code != 1 || !strings.Contains(res.msg, "before the bootstrap finished") {
		t.Errorf("cut stream: exit %d %q", res.code, res.msg)
	}
	if res := runBootstrapCLI(t, hs.URL); res.code != 2 {
		t.Errorf("no image: exit %d %q", res.code, res.msg)
	}
}
