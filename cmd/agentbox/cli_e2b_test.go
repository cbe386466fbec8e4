package main

import (
	"strings"
	"testing"
)

// TestE2BEnv: the five variables, quoted for a shell, from --url and
// --api-key; a loopback server's domain is localhost with its port; a
// keyless server gets a key of E2B's form.
func TestE2BEnv(t *testing.T) {
	t.Setenv("AGENTBOX_API_KEY", "")
	res := runCLI(t, "http://127.0.0.1:8123/", "", "e2b", "env", "--api-key", "e2b_it's")
	want := "export E2B_API_URL='http://127.0.0.1:8123'\n" +
		"export E2B_SANDBOX_URL='http://127.0.0.1:8123'\n" +
		"export E2B_VOLUME_API_URL='http://127.0.0.1:8123'\n" +
		"export E2B_DOMAIN='localhost:8123'\n" +
		"export E2B_API_KEY='e2b_it'\\''s'\n"
	if res.code != 0 || res.stdout != want {
		t.Errorf("e2b env: %d %q %s\nwant %q", res.code, res.stdout, res.msg, want)
	}
	res = runCLI(t, "https://sandbox.example.com", "", "e2b", "env")
	if !strings.Contains(res.stdout, "E2B_DOMAIN='sandbox.example.com'\n") || !strings.Contains(res.stdout, "E2B_API_KEY='"+keylessE2BKey+"'") ||
		!strings.Contains(res.stdout, "E2B_API_URL='https://sandbox.example.com'") {
		t.Errorf("e2b env of a remote keyless server: %q", res.stdout)
	}
	res = runCLI(t, "http://127.0.0.1:8123", "", "e2b", "env", "--domain", "sb.example.com")
	if !strings.Contains(res.stdout, "E2B_DOMAIN='sb.example.com'\n") {
		t.Errorf("--domain: %q", res.stdout)
	}
	if res := runCLI(t, "ftp://x", "", "e2b", "env"); res.code != 2 {
		t.Errorf("bad URL: exit %d %q, want a usage error", res.code, res.msg)
	}
}
