package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEgressBrokerE2BSDK: the unmodified E2B SDK creates a sandbox with
// network rules (a header transform) and changes its network at run time
// (updateNetwork); the header reaches the upstream, never the sandbox. Its
// Secret API (create, getInfo, list, exists, update, destroy) keeps
// secrets in the daemon's vault, and a rule's Secret.fill placeholder is
// resolved by the broker: the value reaches the upstream, never the SDK's
// answers nor the sandbox; another tenant sees none of it.
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
	const keyB = "e2b_ffeeddccbbaa99887766554433221100"
	d := startDaemon(t, "NETWORK=on", "NETWORK_BRIDGE=abxb"+suffix, "NETWORK_DNS="+inet.addr,
		"API_KEYS="+key+":alice,"+keyB+":bob", "NETWORK_BROKER_CA_FILE="+caFile)
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
	node := func(script string, extra ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "node", "-e", script)
		cmd.Env = append(append([]string(nil), env...), extra...)
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

	// The Secret API. The SDK's answers never carry the value.
	raw := make([]byte, 12)
	_, _ = rand.Read(raw)
	value := "e2b-secret-" + hex.EncodeToString(raw)
	sout := node(`const { Secret } = require('e2b');
(async () => {
  const s = await Secret.create('Upstream-Token', process.env.VALUE, { metadata: { team: 'ml' } });
  console.log(JSON.stringify(s));
  let dup = 'created twice';
  try { await Secret.create('upstream-token', 'x') } catch (e) { dup = e.constructor.name }
  console.log('dup', dup);
  const byId = await Secret.getInfo(s.secretId);
  const byName = await Secret.getInfo('upstream-token');
  console.log('same', byId.secretId === s.secretId && byName.secretId === s.secretId, byName.name, byName.metadata.team);
  for (const n of ['a-one', 'a-two', 'a-three']) await Secret.create(n, 'v-' + n);
  const p = Secret.list({ limit: 2 }); const names = [];
  for (let i = 0; i < 10 && p.hasNext; i++) for (const x of await p.nextItems()) names.push(x.name);
  console.log('list', names.join(','));
  console.log('exists', await Secret.exists('upstream-token'), await Secret.exists('nope'));
  console.log('fill', Secret.fill('upstream-token'));
})().catch(e => { console.error(e); process.exit(1) });`, "VALUE="+value)
	for _, want := range []string{`"name":"upstream-token"`, `"version":1`, `"team":"ml"`, "dup", "same true upstream-token ml",
		"list a-one,a-three,a-two,upstream-token", "exists true false", "fill ${e2b.secrets.upstream-token}"} {
		if !strings.Contains(sout, want) {
			t.Fatalf("Secret API: no %q in\n%s", want, sout)
		}
	}
	if strings.Contains(sout, "dup created twice") || strings.Contains(sout, value) {
		t.Fatalf("Secret API: a second create succeeded or the value came back:\n%s", sout)
	}
	// Bob has none of Alice's secrets, and cannot bind them.
	bob := "E2B_API_KEY=" + keyB
	if got := node(`const { Secret } = require('e2b');
(async () => { console.log(await Secret.exists('upstream-token'), (await Secret.list().nextItems()).length, await Secret.destroy('upstream-token')) })()
  .catch(e => { console.error(e); process.exit(1) });`, bob); got != "false 0 false" {
		t.Fatalf("bob's view of alice's secrets: %q", got)
	}
	if got := node(`const { Sandbox, Secret } = require('e2b');
Sandbox.create('host', { network: { rules: { 'api.test': [{ transform: { headers: { Authorization: 'Bearer ' + Secret.fill('upstream-token') } } }] } } })
  .then(sb => console.log('created', sb.sandboxId), e => console.log('refused', e.message));`, bob); !strings.HasPrefix(got, "refused") {
		t.Fatalf("bob bound alice's secret: %q", got)
	}
	// A rule fills the secret in; the next request after an update
	// carries the new version.
	node(`const { Sandbox, Secret } = require('e2b');
Sandbox.updateNetwork('` + id + `', { rules: { 'api.test': [{ transform: { headers: { Authorization: 'Bearer ' + Secret.fill('Upstream-Token') } } }] } })
  .catch(e => { console.error(e); process.exit(1) });`)
	execIn(t, d, key, id, `curl -sS https://api.test/filled`)
	if got := api.take(); !strings.Contains(got, "Bearer "+value) || strings.Contains(got, "e2b.secrets") {
		t.Fatalf("the filled secret did not arrive:\n%s", got)
	}
	if got := execIn(t, d, key, id, `env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'`); strings.Contains(got, value[len(value)/2:]) {
		t.Fatal("the secret is in the sandbox's environment")
	}
	if got := node(`const { Secret } = require('e2b');
Secret.update('upstream-token', process.env.VALUE + '-v2').then(s => console.log(s.version, s.metadata.team), e => { console.error(e); process.exit(1) });`, "VALUE="+value); got != "2 ml" {
		t.Fatalf("update: %q", got)
	}
	execIn(t, d, key, id, `curl -sS https://api.test/rotated`)
	if got := api.take(); !strings.Contains(got, "Bearer "+value+"-v2") {
		t.Fatalf("after Secret.update:\n%s", got)
	}
	// Destroyed: the rule's request is not sent without it (502), and
	// the SDK reports it gone.
	if got := node(`const { Secret } = require('e2b');
(async () => { console.log(await Secret.destroy('upstream-token'), await Secret.destroy('upstream-token'), await Secret.exists('upstream-token')) })()
  .catch(e => { console.error(e); process.exit(1) });`); got != "true false false" {
		t.Fatalf("destroy: %q", got)
	}
	if got := execIn(t, d, key, id, `curl -sS -o /dev/null -w '%{http_code}' https://api.test/gone`); got != "502" {
		t.Fatalf("a request needing a destroyed secret: %q", got)
	}
	if got := api.take(); got != "" {
		t.Fatalf("a request needing a destroyed secret went out:\n%s", got)
	}
}
