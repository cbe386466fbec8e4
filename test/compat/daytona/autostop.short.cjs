// Auto-stop through the unmodified @daytonaio/sdk: run by
// TestDaytonaSDKAutoStop against a daemon whose MAX_TIMEOUT is a few
// seconds, so autoStopInterval 0 (the server's maximum) ends soon.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { Daytona } = require('@daytonaio/sdk')

const daytona = new Daytona()
const created = []
after(async () => {
  for (const sb of created) await sb.delete().catch(() => {})
  setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref()
})

async function native(id) {
  const base = process.env.DAYTONA_API_URL.replace(/\/api$/, '')
  const res = await fetch(`${base}/v1/sandboxes/${id}`, { headers: { Authorization: `Bearer ${process.env.DAYTONA_API_KEY}` } })
  assert.equal(res.status, 200)
  return res.json()
}

test('auto-stop pauses the sandbox (memory kept), start resumes it', async () => {
  const sb = await daytona.create({ snapshot: 'host', autoStopInterval: 0 })
  created.push(sb)
  // /tmp is a tmpfs: in memory, gone after a stop, kept by a pause.
  await sb.fs.uploadFile(Buffer.from('in memory'), '/tmp/mem.txt')
  const end = Date.now() + 60000
  while ((await daytona.get(sb.id)).state !== 'stopped') {
    assert.ok(Date.now() < end, 'the sandbox was not stopped by its auto-stop within a minute')
    await new Promise((r) => setTimeout(r, 200))
  }
  assert.equal((await native(sb.id)).state, 'paused')
  await sb.start()
  assert.equal(sb.state, 'started')
  assert.equal((await sb.process.executeCommand('cat /tmp/mem.txt')).result, 'in memory')
})
