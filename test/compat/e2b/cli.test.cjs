// E2B's own CLI (@e2b/cli, pinned by test/e2e TestE2BSDK, which passes its
// path in E2B_CLI) against agentbox, configured by the same E2B_*
// variables as the SDKs.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const { Sandbox } = require('e2b')
const { BASE, waitFor } = require('./helpers.cjs')

const CLI = process.env.E2B_CLI

// e2b runs the CLI with args, stdin closed (its exec pipes stdin into the
// command); it resolves with stdout, stderr and the exit code (never
// rejects), killed after 60 s.
function e2b(...args) {
  return new Promise((resolve) => {
    const child = spawn(CLI, args, { env: { ...process.env, NO_UPDATE_NOTIFIER: '1' }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => { stdout += d })
    child.stderr.on('data', (d) => { stderr += d })
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
    child.on('close', (code, signal) => { clearTimeout(timer); resolve({ code: signal ? signal : code, stdout, stderr }) })
  })
}

function ok(r, what) {
  assert.equal(r.code, 0, `${what}: exit ${r.code}\n${r.stdout}\n${r.stderr}`)
  return r.stdout
}

test('e2b sandbox list, info, exec, metrics, logs, kill; template list', { skip: !CLI && 'E2B_CLI is not set' }, async () => {
  const tag = `cli${Date.now()}`
  const sbx = await Sandbox.create(BASE, { metadata: { tag } })
  try {
    const listed = JSON.parse(ok(await e2b('sandbox', 'list', '--metadata', `tag=${tag}`, '--format', 'json'), 'sandbox list'))
    assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
    assert.equal(listed[0].templateId, 'base')
    assert.deepEqual(listed[0].metadata, { tag })
    const pretty = ok(await e2b('sandbox', 'list'), 'sandbox list (pretty)')
    assert.match(pretty, new RegExp(sbx.sandboxId))

    const info = JSON.parse(ok(await e2b('sandbox', 'info', sbx.sandboxId, '--format', 'json'), 'sandbox info'))
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.state, 'running')

    assert.equal(ok(await e2b('sandbox', 'exec', sbx.sandboxId, 'echo', 'from-the-cli'), 'sandbox exec'), 'from-the-cli\n')
    assert.match(ok(await e2b('sandbox', 'metrics', sbx.sandboxId), 'sandbox metrics'), /Memory:/)
    // Log lines are JSON objects, as E2B's CLI parses them.
    assert.match(ok(await e2b('sandbox', 'logs', sbx.sandboxId, '--format', 'json'), 'sandbox logs'), /"level"/)

    const templates = JSON.parse(ok(await e2b('template', 'list', '--format', 'json'), 'template list'))
    assert.ok(templates.some((t) => t.templateID === 'base'), JSON.stringify(templates.map((t) => t.templateID)))

    ok(await e2b('sandbox', 'kill', sbx.sandboxId), 'sandbox kill')
    assert.ok(!(await Sandbox.list({ query: { metadata: { tag } } }).nextItems()).length, 'killed by the CLI')
  } finally {
    await sbx.kill().catch(() => {})
  }
})

test('e2b sandbox create --detach, then kill', { skip: !CLI && 'E2B_CLI is not set' }, async () => {
  const out = ok(await e2b('sandbox', 'create', BASE, '--detach'), 'sandbox create --detach')
  const id = (out.match(/sandbox ID ([a-z0-9]+)/i) || out.match(/([a-z0-9]{20})/) || [])[1]
  assert.ok(id, `no sandbox ID in:\n${out}`)
  const s = await Sandbox.connect(id)
  assert.equal((await s.commands.run('echo detached')).stdout, 'detached\n')
  ok(await e2b('sandbox', 'kill', id), 'sandbox kill')
  assert.equal(await s.isRunning(), false)
})

// `e2b sandbox create` opens a terminal: run it in a pseudo-terminal
// (util-linux's script), type a command and exit.
test('e2b sandbox create: a terminal in the sandbox', { skip: (!CLI && 'E2B_CLI is not set') }, async () => {
  const child = spawn('script', ['-qfec', `${CLI} sandbox create ${BASE}`, '/dev/null'], { env: { ...process.env, NO_UPDATE_NOTIFIER: '1' } })
  let out = ''
  child.stdout.on('data', (d) => { out += d })
  child.stderr.on('data', (d) => { out += d })
  const done = new Promise((resolve) => child.on('exit', resolve))
  try {
    await waitFor(() => /\$ $/.test(out.replace(/\x1b\[[0-9;?]*[a-zA-Z]|\x1b\][^\x07]*\x07|\r/g, '').trimEnd() + ' '), 60_000, `a shell prompt in:\n${out}`)
    child.stdin.write('echo PTY-$((6*7))\n')
    await waitFor(() => out.includes('PTY-42'), 20_000, `the command's output in:\n${out}`)
    child.stdin.write('exit\n')
    const code = await Promise.race([done, new Promise((r) => setTimeout(() => r('timeout'), 30_000))])
    assert.equal(code, 0, out)
    const id = (out.match(/sandbox ID ([a-z0-9]+)/) || [])[1]
    assert.ok(id, out)
  } finally {
    child.kill('SIGKILL')
  }
})
