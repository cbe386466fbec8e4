// Archive and recover, auto-stop, auto-archive and auto-delete intervals
// and volumes through the unmodified @daytonaio/sdk.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { Daytona, DaytonaNotFoundError } = require('@daytonaio/sdk')

const daytona = new Daytona()
const created = []
const volumes = []
after(async () => {
  for (const sb of created) await sb.delete().catch(() => {})
  for (const v of volumes) await daytona.volume.delete(v).catch(() => {})
  setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref()
})

async function make(params) {
  const sb = await daytona.create(params)
  created.push(sb)
  return sb
}

// The native record of a sandbox (the same key opens the native API).
async function native(id) {
  const base = process.env.DAYTONA_API_URL.replace(/\/api$/, '')
  const res = await fetch(`${base}/v1/sandboxes/${id}`, { headers: { Authorization: `Bearer ${process.env.DAYTONA_API_KEY}` } })
  assert.equal(res.status, 200)
  return res.json()
}

test('archive and recover; auto-archive and auto-delete intervals; auto-stop pauses', async () => {
  const tag = `t${Date.now()}`
  const sb = await make({ labels: { suite: tag }, autoArchiveInterval: 60, autoDeleteInterval: 30, autoStopInterval: 20 })
  assert.equal(sb.autoArchiveInterval, 60)
  assert.equal(sb.autoDeleteInterval, 30)
  assert.equal(sb.autoStopInterval, 20)
  // The native backend can pause: the auto-stop keeps the sandbox.
  assert.equal((await native(sb.id)).auto_pause, true)

  await sb.fs.uploadFile(Buffer.from('kept'), '/home/user/kept.txt')
  // Daytona archives stopped sandboxes only.
  await assert.rejects(sb.archive(), (e) => e.statusCode === 400 && /not stopped/.test(e.message))
  await sb.stop()
  // Stopped, it lives its auto-delete interval.
  const end = Date.parse((await native(sb.id)).end_at)
  assert.ok(end > Date.now() + 25 * 60e3 && end <= Date.now() + 31 * 60e3, `end ${new Date(end).toISOString()}`)
  await sb.archive()
  assert.equal(sb.state, 'archived')
  assert.equal((await daytona.get(sb.id)).state, 'archived')
  const archived = []
  for await (const x of daytona.list({ labels: { suite: tag }, states: ['archived'] })) archived.push(x.id)
  assert.deepEqual(archived, [sb.id])
  for await (const x of daytona.list({ labels: { suite: tag }, states: ['stopped'] })) assert.fail(`listed as stopped: ${x.id}`)
  await sb.start()
  assert.equal(sb.state, 'started')
  assert.equal((await sb.fs.downloadFile('/home/user/kept.txt')).toString(), 'kept', 'the filesystem outlives the archive')
  await sb.stop()
  await sb.archive()
  await sb.recover()
  assert.equal(sb.state, 'started')
  assert.equal((await sb.process.executeCommand('cat /home/user/kept.txt')).result, 'kept')

  await sb.setAutoArchiveInterval(120)
  await sb.setAutoDeleteInterval(-1)
  await sb.setAutostopInterval(30)
  await sb.refreshData()
  assert.equal(sb.autoArchiveInterval, 120)
  assert.equal(sb.autoDeleteInterval, -1)
  assert.equal(sb.autoStopInterval, 30)

  // Auto-delete 0: a stopped sandbox goes at once.
  const eph = await make({ autoDeleteInterval: 0 })
  await eph.stop()
  await assert.rejects(daytona.get(eph.id), DaytonaNotFoundError)
  const eph2 = await make()
  await eph2.stop()
  await eph2.setAutoDeleteInterval(0)
  await assert.rejects(daytona.get(eph2.id), DaytonaNotFoundError)
})

test('volumes: create, list, get, a file written in one sandbox read in another, delete', async () => {
  const name = `vol-${Date.now()}`
  const v = await daytona.volume.create(name)
  volumes.push(v)
  assert.equal(v.name, name)
  assert.equal(v.state, 'ready')
  assert.equal((await daytona.volume.get(name)).id, v.id)
  assert.ok((await daytona.volume.list()).some((x) => x.id === v.id))
  await assert.rejects(daytona.volume.get(`${name}-missing`), DaytonaNotFoundError)

  const a = await make({ volumes: [{ volumeId: v.id, mountPath: '/home/user/data' }] })
  assert.deepEqual(a.volumes.map((x) => [x.volumeId, x.mountPath]), [[v.id, '/home/user/data']])
  let r = await a.process.executeCommand('mkdir -p /home/user/data/sub && echo "from a" > /home/user/data/sub/note.txt')
  assert.equal(r.exitCode, 0, r.result)
  // Daytona refuses to delete a volume in use.
  await assert.rejects(daytona.volume.delete(v), (e) => e.statusCode === 409)
  await a.delete()
  created.splice(created.indexOf(a), 1)

  // Another sandbox mounts it (by name, a subpath): the file is there.
  const b = await make({ volumes: [{ volumeId: name, mountPath: '/mnt/v', subpath: 'sub' }] })
  r = await b.process.executeCommand('cat /mnt/v/note.txt')
  assert.equal(r.result, 'from a\n')
  await b.delete()
  created.splice(created.indexOf(b), 1)

  await daytona.volume.delete(v)
  volumes.splice(volumes.indexOf(v), 1)
  await assert.rejects(daytona.volume.get(name), DaytonaNotFoundError)
})
