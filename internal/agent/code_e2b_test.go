package agent_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// e2bSDKScript drives the agent's code routes with the unmodified
// @e2b/code-interpreter JS SDK: a Sandbox object whose direct URL points at
// the agent, as an E2B front-end proxying port 49999 would.
const e2bSDKScript = `
const assert = require('assert');
const { Sandbox } = require('@e2b/code-interpreter');
const sbx = Object.create(Sandbox.prototype);
sbx.sandboxId = 'local';
sbx.isRunning = async () => true;
sbx.connectionConfig = {
  requestTimeoutMs: 30000,
  getSignal: (ms) => AbortSignal.timeout(ms || 30000),
  getSandboxDirectUrl: () => process.env.AGENT_URL,
};
(async () => {
  const seen = [];
  let e = await sbx.runCode('x = [1, 2, 3]\nprint("hi")\nimport sys; print("oops", file=sys.stderr)\nx',
    { onStdout: (m) => seen.push(m.line), onResult: (r) => seen.push(r.text) });
  assert.deepStrictEqual(e.logs, { stdout: ['hi\n'], stderr: ['oops\n'] });
  assert.strictEqual(e.text, '[1, 2, 3]');
  assert.strictEqual(e.executionCount, 1);
  assert.deepStrictEqual(seen, ['hi\n', '[1, 2, 3]']);
  e = await sbx.runCode('1/0');
  assert.strictEqual(e.error.name, 'ZeroDivisionError');
  assert.strictEqual(e.error.value, 'division by zero');
  assert.ok(e.error.traceback.includes('1/0'));
  e = await sbx.runCode('class H:\n    def _repr_html_(self): return "<b>h</b>"\nH()');
  assert.deepStrictEqual(e.results[0].formats(), ['html']);
  assert.ok(e.results[0].isMainResult);
  const ctx = await sbx.createCodeContext({ language: 'bash', cwd: '/tmp' });
  assert.strictEqual(ctx.language, 'bash');
  await sbx.runCode('cd /; export A=1', { context: ctx });
  e = await sbx.runCode('echo $PWD $A; false', { context: ctx });
  assert.deepStrictEqual(e.logs.stdout, ['/ 1\n']);
  assert.strictEqual(e.error.value, '1');
  const list = await sbx.listCodeContexts();
  assert.deepStrictEqual(list.map((c) => c.language), ['python', 'bash']);
  await sbx.restartCodeContext(ctx);
  e = await sbx.runCode('echo ${A-none} $PWD', { context: ctx });
  assert.deepStrictEqual(e.logs.stdout, ['none /tmp\n']);
  await sbx.removeCodeContext(ctx.id);
  await assert.rejects(sbx.runCode('1', { context: ctx }), { name: 'NotFoundError' });
  e = await sbx.runCode('import os; os.environ["E"]', { envs: { E: 'v' } });
  assert.strictEqual(e.text, 'v');
  // The SDK's own timeout aborts the request: the agent interrupts the
  // execution and the next one runs at once.
  await assert.rejects(sbx.runCode('import time; time.sleep(5)', { timeoutMs: 500 }), { name: 'TimeoutError' });
  const t0 = Date.now();
  e = await sbx.runCode('"still here"');
  assert.strictEqual(e.text, 'still here');
  assert.ok(Date.now() - t0 < 2000, 'next execution waited');
  console.log('e2b sdk ok');
  process.exit(0); // the SDK leaves request timers behind
})().catch((err) => { console.error(err); process.exit(1); });
`

// TestCodeE2BSDK runs e2bSDKScript when the SDK is installed: set
// AGENTBOX_E2B_SDK to a directory with node_modules/@e2b/code-interpreter
// (npm install @e2b/code-interpreter).
func TestCodeE2BSDK(t *testing.T) {
	sdk := os.Getenv("AGENTBOX_E2B_SDK")
	if sdk == "" {
		t.Skip("set AGENTBOX_E2B_SDK to a directory where @e2b/code-interpreter is installed")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	agentURL := startTCPAgent(t)

	script := filepath.Join(t.TempDir(), "check.js")
	if err := os.WriteFile(script, []byte(e2bSDKScript), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "AGENT_URL="+agentURL, "NODE_PATH="+filepath.Join(sdk, "node_modules"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("node took %v", time.Since(start))
	if err != nil || !strings.Contains(string(out), "e2b sdk ok") {
		t.Fatalf("SDK check: %v\n%s", err, out)
	}
}

// startTCPAgent runs the agent on a TCP port (the SDK speaks HTTP over
// TCP) and returns its URL; it is stopped at the end of the test.
func startTCPAgent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(agenttest.Binary(t), "--listen", "tcp://"+addr, "--workdir", t.TempDir(), "--log-level", "warn")
	cmd.Env = append(os.Environ(), systemPath)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	url := "http://" + addr
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			return url
		}
	}
	t.Fatal("agent not listening after 10s")
	return ""
}
