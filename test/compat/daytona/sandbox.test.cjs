// The unmodified @daytonaio/sdk against agentbox, configured by nothing
// but DAYTONA_API_URL and DAYTONA_API_KEY (as `agentbox daytona env`
// prints them); DAYTONA_OTHER_API_KEY is another tenant's key.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { Daytona, DaytonaNotFoundError } = require('@daytonaio/sdk')

const daytona = new Daytona()
const created = []
after(async () => {
  for (const sb of created) await sb.delete().catch(() => {})
  // The SDK keeps a socket.io client retrying the event stream agentbox
  // does not serve; end the process once the tests are done.
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

test("Daytona's default snapshot names are the default template", async () => {
  const plain = await make({})
  const want = (await native(plain.id)).template
  await plain.delete()
  for (const snapshot of ['daytona-small', 'daytonaio/sandbox:0.4.3']) {
    const sb = await make({ snapshot })
    assert.equal((await native(sb.id)).template, want, snapshot)
    assert.equal((await sb.process.executeCommand('echo ok')).result.trim(), 'ok', snapshot)
    await sb.delete()
  }
  // A name that is no template is still refused.
  await assert.rejects(daytona.create({ snapshot: 'daytona-nonesuch' }), (e) => /nonesuch/.test(e.message))
})

test('lifecycle: create, get, list by labels, labels, stop/start, delete, other tenant', async () => {
  const tag = `t${Date.now()}`
  const sb = await make({ name: `sb-${tag}`, labels: { suite: tag, role: 'a' }, envVars: { GREETING: 'hello' } })
  assert.equal(sb.state, 'started')
  assert.equal(sb.labels.suite, tag)
  assert.equal(sb.env.GREETING, 'hello')
  assert.equal(sb.snapshot, 'base')
  assert.ok(sb.toolboxProxyUrl.endsWith('/api/toolbox'))

  const byId = await daytona.get(sb.id)
  assert.equal(byId.name, `sb-${tag}`)
  const byName = await daytona.get(`sb-${tag}`)
  assert.equal(byName.id, sb.id)

  const other = await make({ labels: { suite: tag, role: 'b' } })
  const listed = []
  for await (const s of daytona.list({ labels: { suite: tag }, limit: 1 })) listed.push(s.id)
  assert.deepEqual(listed.sort(), [sb.id, other.id].sort(), 'both, over two pages of one')
  const onlyA = []
  for await (const s of daytona.list({ labels: { suite: tag, role: 'a' } })) onlyA.push(s.id)
  assert.deepEqual(onlyA, [sb.id])

  const labels = await sb.setLabels({ suite: tag, role: 'c' })
  assert.equal(labels.role, 'c')
  assert.equal((await daytona.get(sb.id)).labels.role, 'c')

  // The process sees the env of create.
  assert.equal((await sb.process.executeCommand('echo $GREETING')).result.trim(), 'hello')

  await sb.fs.uploadFile(Buffer.from('kept'), '/home/user/kept.txt')
  await sb.stop()
  assert.equal(sb.state, 'stopped')
  await sb.start()
  assert.equal(sb.state, 'started')
  assert.equal((await sb.fs.downloadFile('/home/user/kept.txt')).toString(), 'kept', 'the filesystem outlives stop')

  // Another tenant sees none of it, in Daytona's error shape.
  const bob = new Daytona({ apiKey: process.env.DAYTONA_OTHER_API_KEY, apiUrl: process.env.DAYTONA_API_URL })
  await assert.rejects(bob.get(sb.id), (e) => e instanceof DaytonaNotFoundError && e.statusCode === 404)
  const bobs = []
  for await (const s of bob.list({ labels: { suite: tag } })) bobs.push(s.id)
  assert.deepEqual(bobs, [])

  // What agentbox does not do is Daytona's error shape with a clear message.
  await assert.rejects(sb.resize({ cpu: 2 }), (e) => e.statusCode === 501 && /not supported by agentbox/.test(e.message))
  const res = await fetch(`${process.env.DAYTONA_API_URL}/no-such-route`, { headers: { Authorization: `Bearer ${process.env.DAYTONA_API_KEY}` } })
  assert.equal(res.status, 404)
  assert.equal((await res.json()).statusCode, 404)

  await other.delete()
  await assert.rejects(daytona.get(other.id), DaytonaNotFoundError)
})

test('process: executeCommand with cwd, env, timeout and exit code; codeRun', async () => {
  const sb = await make()
  let r = await sb.process.executeCommand('pwd && echo $FOO && echo err >&2 && exit 3', '/tmp', { FOO: 'bar' })
  assert.equal(r.exitCode, 3)
  // stdout and stderr are two pipes: both are in the result, each in order.
  assert.deepEqual(r.result.trim().split('\n').sort(), ['/tmp', 'bar', 'err'])
  r = await sb.process.executeCommand('true')
  assert.equal(r.exitCode, 0)
  await assert.rejects(sb.process.executeCommand('sleep 30', undefined, undefined, 1), (e) => e.statusCode === 408)
  r = await sb.process.codeRun('import sys\nprint(1+1, sys.argv[1:])', { argv: ['x'] })
  assert.equal(r.exitCode, 0)
  assert.equal(r.result.trim(), "2 ['x']")
  r = await sb.process.codeRun('raise SystemExit(5)')
  assert.equal(r.exitCode, 5)
  assert.equal(await sb.getUserHomeDir(), '/home/user')
  assert.equal(await sb.getWorkDir(), '/workspace')
})

test('files: upload, list, info, folder, move, find, search, replace, permissions, delete, bulk', async () => {
  const sb = await make()
  const dir = '/home/user/d'
  await sb.fs.createFolder(dir, '755')
  await sb.fs.uploadFiles([
    { source: Buffer.from('alpha\nneedle one\n'), destination: `${dir}/a.txt` },
    { source: Buffer.from('beta\n'), destination: `${dir}/sub/b.md` },
  ])
  const names = (await sb.fs.listFiles(dir)).map((f) => f.name).sort()
  assert.deepEqual(names, ['a.txt', 'sub'])
  const info = await sb.fs.getFileDetails(`${dir}/a.txt`)
  assert.equal(info.size, 17)
  assert.equal(info.isDir, false)
  const found = await sb.fs.findFiles(dir, 'needle')
  assert.equal(found.length, 1)
  assert.equal(found[0].line, 2)
  assert.equal(found[0].content, 'needle one')
  assert.deepEqual((await sb.fs.searchFiles(dir, '*.md')).files, [`${dir}/sub/b.md`])
  const rep = await sb.fs.replaceInFiles([`${dir}/a.txt`, `${dir}/missing`], 'needle', 'pin')
  assert.equal(rep[0].success, true)
  assert.equal(rep[1].success, false)
  assert.equal((await sb.fs.downloadFile(`${dir}/a.txt`)).toString(), 'alpha\npin one\n')
  await sb.fs.setFilePermissions(`${dir}/a.txt`, { mode: '600' })
  assert.equal((await sb.fs.getFileDetails(`${dir}/a.txt`)).permissions, '0600')
  await sb.fs.moveFiles(`${dir}/a.txt`, `${dir}/c.txt`)
  await assert.rejects(sb.fs.getFileDetails(`${dir}/a.txt`), DaytonaNotFoundError)
  const many = await sb.fs.downloadFiles([{ source: `${dir}/c.txt` }, { source: `${dir}/sub/b.md` }, { source: `${dir}/none` }])
  assert.equal(many[0].result.toString(), 'alpha\npin one\n')
  assert.equal(many[1].result.toString(), 'beta\n')
  assert.ok(many[2].error, 'a missing file is an error of its own')
  await sb.fs.deleteFile(`${dir}/c.txt`)
  await sb.fs.deleteFile(dir, true)
  await assert.rejects(sb.fs.getFileDetails(dir), DaytonaNotFoundError)
})

test('files: 100 MB upload and download, streamed', async () => {
  const os = require('node:os')
  const fs = require('node:fs')
  const path = require('node:path')
  const crypto = require('node:crypto')
  const sb = await make()
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dtn-'))
  try {
    const src = path.join(tmp, 'big.bin')
    const chunk = crypto.randomBytes(1 << 20)
    const fd = fs.openSync(src, 'w')
    const hash = crypto.createHash('sha256')
    for (let i = 0; i < 100; i++) { fs.writeSync(fd, chunk); hash.update(chunk) }
    fs.closeSync(fd)
    const want = hash.digest('hex')
    await sb.fs.uploadFile(src, '/home/user/big.bin')
    const r = await sb.process.executeCommand('sha256sum /home/user/big.bin')
    assert.equal(r.result.split(' ')[0], want)
    const dst = path.join(tmp, 'back.bin')
    await sb.fs.downloadFile('/home/user/big.bin', dst)
    const got = crypto.createHash('sha256').update(fs.readFileSync(dst)).digest('hex')
    assert.equal(got, want)
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true })
  }
})
