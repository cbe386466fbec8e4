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
  const listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
  await sbx.kill();
  console.log(JSON.stringify({ id: sbx.sandboxId, stdout: run.stdout, file, code: code.text, listed }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
