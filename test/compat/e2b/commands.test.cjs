const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { Sandbox, CommandExitError } = require('e2b')
const { waitFor, BASE, checkKernel } = require('./helpers.cjs')

let sbx
before(async () => { sbx = await Sandbox.create(BASE); await checkKernel(sbx) })
after(async () => { await sbx?.kill() })

test('run: stdout, stderr, exit codes, CommandExitError', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
  const cwd = await sbx.commands.run('pwd', { cwd: '/tmp', envs: { X: '1' } })
  assert.equal(cwd.stdout, '/tmp\n')
  await assert.rejects(sbx.commands.run('echo bad >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, String(e))
    assert.equal(e.exitCode, 3)
    assert.equal(e.stderr, 'bad\n')
    return true
  })
  const me = await sbx.commands.run('id -un', { user: 'user' })
  assert.equal(me.stdout, 'user\n')
})

test('commands are in the exec history, with their exit code', async () => {
  // The same history the native exec keeps (GET /v1/sandboxes/{id}/execs,
  // with the same API key): the data plane records envd's Start too.
  await assert.rejects(sbx.commands.run('echo history; exit 7'), (e) => e instanceof CommandExitError && e.exitCode === 7)
  const res = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes/${sbx.sandboxId}/execs`, { headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` } })
  assert.equal(res.status, 200)
  const { execs } = await res.json()
  const rec = execs.find((e) => e.cmd.includes('echo history; exit 7'))
  assert.ok(rec, `not in the history: ${JSON.stringify(execs)}`)
  assert.equal(rec.exit_code, 7)
  assert.ok(rec.user && !rec.error, JSON.stringify(rec))
})

test('many round trips on kept-alive connections', async () => {
  // Streams answered while their request was still being forwarded once
  // cut connections at random: 200 in a row must all pass.
  for (let i = 0; i < 200; i++) {
    const r = await sbx.commands.run('true')
    assert.equal(r.exitCode, 0)
  }
})

test('onStdout streams before the command exits', async () => {
  const chunks = []
  const h = await sbx.commands.run('echo first; sleep 30; echo second', { background: true, onStdout: (d) => chunks.push(d) })
  await waitFor(() => chunks.join('').includes('first'), 10_000, 'the first line')
  assert.equal(h.exitCode, undefined, 'the command is still running')
  assert.ok(!chunks.join('').includes('second'))
  await h.kill()
  await assert.rejects(h.wait())
})

test('background: stdin, wait, kill, list, a disconnected client does not kill', async () => {
  const out = []
  const cat = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => out.push(d) })
  await sbx.commands.sendStdin(cat.pid, 'hello stdin\n')
  await waitFor(() => out.join('').includes('hello stdin'), 10_000, 'cat echoing stdin')
  await sbx.commands.closeStdin(cat.pid)
  const done = await cat.wait()
  assert.equal(done.exitCode, 0)

  const bg = await sbx.commands.run('sleep 1; echo waited', { background: true })
  const res = await bg.wait()
  assert.equal(res.stdout, 'waited\n')

  const sleeper = await sbx.commands.run('sleep 60', { background: true })
  await sleeper.disconnect()
  const list = await sbx.commands.list()
  assert.ok(list.some((p) => p.pid === sleeper.pid), 'the process runs on after its client disconnected')
  // Another client attaches to it, then kills it.
  const again = await sbx.commands.connect(sleeper.pid)
  assert.ok(await sbx.commands.kill(sleeper.pid))
  await assert.rejects(again.wait())
  await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === sleeper.pid), 10_000, 'the killed process to go')
})

test('pty: create, sendInput, resize', async () => {
  let data = ''
  const dec = new TextDecoder()
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { data += dec.decode(d) } })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo $((6*7))\n'))
  await waitFor(() => data.includes('42'), 10_000, 'the terminal to answer')
  await sbx.pty.resize(term.pid, { cols: 120, rows: 40 })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'))
  await waitFor(() => data.includes('40 120'), 10_000, 'the new size')
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('exit\n'))
  const r = await term.wait()
  assert.equal(r.exitCode, 0)
})
