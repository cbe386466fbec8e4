// PTY sessions through the unmodified @daytonaio/sdk: create with env and
// cwd, type into the shell and read the terminal, resize (seen by stty),
// list and info, disconnect and connect again to the same shell, kill,
// and the exit code of a shell that exits.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { Daytona } = require('@daytonaio/sdk')

const daytona = new Daytona()
const created = []
after(async () => {
  for (const sb of created) await sb.delete().catch(() => {})
  setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref()
})

// terminal collects a PTY's output as text and waits for a pattern in it.
function terminal() {
  let text = ''
  const decoder = new TextDecoder()
  return {
    onData: (bytes) => { text += decoder.decode(bytes, { stream: true }) },
    async waitFor(re, ms = 15000) {
      const end = Date.now() + ms
      while (Date.now() < end) {
        if (re.test(text)) return text
        await new Promise((r) => setTimeout(r, 50))
      }
      assert.fail(`timed out waiting for ${re} in the terminal: ${JSON.stringify(text.slice(-500))}`)
    },
  }
}

test('pty: create, input, resize, list, reconnect, kill, exit code', async () => {
  const sb = await daytona.create()
  created.push(sb)
  const t1 = terminal()
  const pty = await sb.process.createPty({ id: 'term1', cwd: '/tmp', envs: { GREETING: 'hello-pty' }, cols: 100, rows: 30, onData: t1.onData })
  await pty.sendInput('echo "$GREETING from $(pwd)"; stty size\n')
  await t1.waitFor(/hello-pty from \/tmp/)
  await t1.waitFor(/30 100/)

  await pty.resize(120, 40)
  await pty.sendInput('stty size\n')
  await t1.waitFor(/40 120/)

  const list = await sb.process.listPtySessions()
  assert.deepEqual(list.map((s) => s.id), ['term1'])
  const info = await sb.process.getPtySessionInfo('term1')
  assert.equal(info.active, true)
  assert.equal(info.cols, 120)
  assert.equal(info.rows, 40)

  // The shell outlives its socket: set a variable, leave, come back.
  await pty.sendInput('export MARK=still-here\n')
  await new Promise((r) => setTimeout(r, 300))
  await pty.disconnect()
  const t2 = terminal()
  const again = await sb.process.connectPty('term1', { onData: t2.onData })
  await again.sendInput('echo "mark=$MARK"\n')
  await t2.waitFor(/mark=still-here/)

  await assert.rejects(sb.process.createPty({ id: 'term1', onData: () => {} }))

  await again.kill()
  await assert.rejects(sb.process.getPtySessionInfo('term1'), (e) => e.statusCode === 404)

  const t3 = terminal()
  const short = await sb.process.createPty({ id: 'term2', onData: t3.onData })
  await short.sendInput('exit 7\n')
  const res = await short.wait()
  assert.equal(res.exitCode, 7)
  assert.deepEqual(await sb.process.listPtySessions(), [])
  await assert.rejects(sb.process.connectPty('nope', { onData: () => {} }))
})
