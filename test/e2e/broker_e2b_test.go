package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEgressBrokerE2BSDK: the unmodified E2B SDK creates a sandbox with
// network rules (a header transform) and changes its network at run time
// (updateNetwork); the header reaches the upstream, never the sandbox.
func TestEgressBrokerE2BSDK(t *testing.T) {
	ctx := waitCtx(t, 10*time.Minute)
	sdk := e2bSDK(t, ctx)
	inet := newTestInternet(t, map[string]string{"api.test": "198.18.77.1", "evil.test": "198.18.77.3"})
	ca := newTestCA(t)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	var api seen
	inet.serveTLS(t, "198.18.77.1:443", "api.test", ca, &api)
	suffix := inet.hostIf[len(inet.hostIf)-6:]
	const key = "e2b_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	d := startDaemon(t, "NETWORK=on", "NETWORK_BRIDGE=abxb"+suffix, "NETWORK_DNS="+inet.addr,
		"API_KEYS="+key+":alice", "NETWORK_BROKER_CA_FILE="+caFile)
	bin, _ := binaries(t)
	out, err := exec.CommandContext(ctx, bin, "e2b", "env", "--url", d.url, "--api-key", key).Output()
	if err != nil {
		t.Fatalf("agentbox e2b env: %v", err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NODE_PATH=" + filepath.Join(sdk, "node_modules")}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		env = append(env, k+"="+strings.Trim(v, "'"))
	}
	node := func(script string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "node", "-e", script)
		cmd.Env = env
		res, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, res)
		}
		return strings.TrimSpace(string(res))
	}
	id := node(`const { Sandbox } = require('e2b');
(async () => {
  const sb = await Sandbox.create('host', { network: { rules: { 'api.test': [{ transform: { headers: { Authorization: 'Bearer e2b-rule-value' } } }] } } });
  console.log(sb.sandboxId);
})().catch(e => { console.error(e); process.exit(1) });`)
	id = id[strings.LastIndex(id, "\n")+1:]
	t.Cleanup(func() { d.call(t, "DELETE", "/v1/sandboxes/"+id, key, nil) })
	if got := execIn(t, d, key, id, `curl -sS https://api.test/e2b; env | grep -c e2b-rule-value`); !strings.Contains(got, "upstream api.test") || !strings.HasSuffix(strings.TrimSpace(got), "0") {
		t.Fatalf("through the broker: %q", got)
	}
	if got := api.take(); !strings.Contains(got, "Bearer e2b-rule-value") {
		t.Fatalf("the rule's header did not arrive:\n%s", got)
	}
	// updateNetwork: rules replaced (a new header), a host denied.
	node(`const { Sandbox } = require('e2b');
Sandbox.updateNetwork('` + id + `', { denyOut: ['198.18.77.3/32'], rules: { 'api.test': [{ transform: { headers: { 'X-Changed': 'yes' } } }] } })
  .catch(e => { console.error(e); process.exit(1) });`)
	execIn(t, d, key, id, `curl -sS https://api.test/after`)
	if got := api.take(); !strings.Contains(got, "X-Changed=yes") || strings.Contains(got, "e2b-rule-value") {
		t.Fatalf("after updateNetwork:\n%s", got)
	}
	if got := execIn(t, d, key, id, `curl -sS -m 5 http://198.18.77.3/ 2>&1; echo " rc=$?"`); strings.Contains(got, "hello") {
		t.Fatalf("a denied host after updateNetwork: %q", got)
	}
}
