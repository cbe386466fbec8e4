// Drives a sandbox of a remote template (TEMPLATE, e.g. e2b:base) with the
// unmodified code-interpreter SDK, configured by the environment `agentbox
// e2b env` prints: the daemon creates it at its provider. Driven by
// test/e2e TestRemoteE2BSDK; prints one JSON line.
const { Sandbox } = require('@e2b/code-interpreter');

(async () => {
  const sbx = await Sandbox.create(process.env.TEMPLATE, { timeoutMs: 120000 });
  const run = await sbx.commands.run('echo sdk-$((6*7))');
  await sbx.files.write('/tmp/sdk.txt', 'hello from the sdk');
  const file = await sbx.files.read('/tmp/sdk.txt');
  const code = await sbx.runCode('x = 6\nx * 7');
  // State kept between calls (Daytona's interpreter gives output, not results).
  const state = await sbx.runCode('print(x * 7)');
  const streamed = { stdout: '', stderr: '' };
  await sbx.commands.run('echo out; echo err >&2', {
    onStdout: (d) => { streamed.stdout += d; },
    onStderr: (d) => { streamed.stderr += d; },
  });
  let term = '';
  const dec = new TextDecoder();
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { term += dec.decode(d); } });
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo pty-$((40+2)); exit 0\n'));
  const ptyExit = await pty.wait();
  const listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
  await sbx.kill();
  console.log(JSON.stringify({ id: sbx.sandboxId, stdout: run.stdout, file, code: code.text, state: state.logs.stdout.join(''), streamed,
    pty: term.includes('pty-42'), ptyExit: ptyExit.exitCode, listed }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
