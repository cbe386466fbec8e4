// Snapshots and the declarative image builder of the unmodified
// @daytonaio/sdk on agentbox's template builder. Every image starts FROM
// the built-in `base` template (the test cache's, from the bootstrapped
// Debian): nothing is pulled from the internet. The local files of
// addLocalFile/addLocalDir travel as the SDK sends them, through the S3
// calls of its ObjectStorage, to the daemon.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const zlib = require('node:zlib')
const crypto = require('node:crypto')
const { Daytona, Image, DaytonaNotFoundError } = require('@daytonaio/sdk')

const daytona = new Daytona()
const created = []
const snapshots = []
const dirs = []
after(async () => {
  for (const sb of created) await sb.delete().catch(() => {})
  for (const s of snapshots) await daytona.snapshot.delete(s).catch(() => {})
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true })
  setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref()
})

// writeWheel writes a pure-Python wheel of package agentbox-demo (module
// agentbox_demo, X = value): pipInstall's package, from a local
// --find-links directory instead of an index on the internet.
function writeWheel(dir, value) {
  const files = [
    ['agentbox_demo/__init__.py', `X = ${value}\n`],
    ['agentbox_demo-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\nName: agentbox-demo\nVersion: 1.0\n'],
    ['agentbox_demo-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\nGenerator: agentbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n'],
  ].map(([n, d]) => [n, Buffer.from(d)])
  const record = files.map(([n, d]) => `${n},sha256=${crypto.createHash('sha256').update(d).digest('base64url')},${d.length}`)
  files.push(['agentbox_demo-1.0.dist-info/RECORD', Buffer.from(record.join('\n') + '\nagentbox_demo-1.0.dist-info/RECORD,,\n')])
  // A zip of stored entries.
  const locals = []
  const central = []
  let offset = 0
  for (const [n, d] of files) {
    const name = Buffer.from(n)
    const crc = zlib.crc32(d)
    const h = Buffer.alloc(30)
    h.writeUInt32LE(0x04034b50, 0); h.writeUInt16LE(20, 4); h.writeUInt16LE(0x21, 12)
    h.writeUInt32LE(crc, 14); h.writeUInt32LE(d.length, 18); h.writeUInt32LE(d.length, 22); h.writeUInt16LE(name.length, 26)
    const c = Buffer.alloc(46)
    c.writeUInt32LE(0x02014b50, 0); c.writeUInt16LE(20, 4); c.writeUInt16LE(20, 6); c.writeUInt16LE(0x21, 14)
    c.writeUInt32LE(crc, 16); c.writeUInt32LE(d.length, 20); c.writeUInt32LE(d.length, 24); c.writeUInt16LE(name.length, 28)
    c.writeUInt32LE(offset, 42)
    locals.push(h, name, d)
    central.push(c, name)
    offset += h.length + name.length + d.length
  }
  const cd = Buffer.concat(central)
  const end = Buffer.alloc(22)
  end.writeUInt32LE(0x06054b50, 0); end.writeUInt16LE(files.length, 8); end.writeUInt16LE(files.length, 10)
  end.writeUInt32LE(cd.length, 12); end.writeUInt32LE(offset, 16)
  fs.writeFileSync(path.join(dir, 'agentbox_demo-1.0-py3-none-any.whl'), Buffer.concat([...locals, cd, end]))
}

function tempDir() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'dtn-image-'))
  dirs.push(d)
  return d
}

test('snapshot from a declarative image: logs, states, used by a sandbox, listed, deleted', async () => {
  const dir = tempDir()
  fs.writeFileSync(path.join(dir, 'hello.txt'), 'hello from the context\n')
  fs.mkdirSync(path.join(dir, 'pkg'))
  fs.writeFileSync(path.join(dir, 'pkg', 'mod.py'), 'X = 42\n')
  fs.mkdirSync(path.join(dir, 'wheels'))
  writeWheel(path.join(dir, 'wheels'), 7)
  const name = `img-${Date.now()}`
  const image = Image.base('base')
    // Daytona's images have `python`; agentbox's base has python3.
    .runCommands('ln -sf /usr/bin/python3 /usr/local/bin/python')
    .addLocalDir(path.join(dir, 'wheels'), '/opt/wheels')
    .pipInstall('agentbox-demo', { findLinks: ['/opt/wheels'], extraOptions: '--no-index' })
    .runCommands('echo built > /opt/marker', ['sh', '-c', 'echo exec-form > /opt/exec'])
    .env({ GREETING: 'hi there', LEVEL: '3' })
    .workdir('/opt/app')
    .addLocalFile(path.join(dir, 'hello.txt'), '/opt/app/')
    .addLocalDir(path.join(dir, 'pkg'), '/opt/app/pkg')
    .dockerfileCommands(['RUN test -f /opt/app/hello.txt && echo "context seen"'])
  const logs = []
  const snap = await daytona.snapshot.create({ name, image }, { onLogs: (l) => logs.push(l), timeout: 600 })
  snapshots.push(name)
  assert.equal(snap.state, 'active')
  assert.equal(snap.name, name)
  const text = logs.join('\n')
  assert.match(text, /Creating snapshot .* \(building\)/, 'the states as the SDK reports them')
  assert.match(text, /Step \d+\/\d+ : RUN echo built/, 'the build log streamed')
  assert.match(text, /context seen/, 'the RUN output streamed')
  assert.match(text, /Created snapshot/)

  const got = await daytona.snapshot.get(name)
  assert.equal(got.state, 'active')
  assert.equal(got.general, false)
  const listed = await daytona.snapshot.list()
  assert.ok(listed.items.some((s) => s.name === name && !s.general), 'listed as the tenant\'s')
  assert.ok(listed.items.some((s) => s.name === 'base' && s.general), 'the shared templates are general snapshots')

  // Creating the same name again is Daytona's conflict.
  await assert.rejects(daytona.snapshot.create({ name, image: 'base' }), (e) => e.statusCode === 409)

  const sb = await daytona.create({ snapshot: name })
  created.push(sb)
  assert.equal(sb.snapshot, name)
  const r = await sb.process.executeCommand(
    'cat /opt/marker /opt/exec /opt/app/hello.txt && echo "$GREETING/$LEVEL" && python3 -c "import sys; sys.path.insert(0, \'/opt/app/pkg\'); import mod; print(mod.X)" && python3 -c "import agentbox_demo; print(agentbox_demo.X)"')
  assert.equal(r.exitCode, 0, r.result)
  assert.equal(r.result.trim(), 'built\nexec-form\nhello from the context\nhi there/3\n42\n7', 'pipInstall from a local --find-links directory too')
  assert.equal(await sb.getWorkDir(), '/opt/app', 'the image\'s WORKDIR')
  assert.equal((await sb.process.executeCommand('pwd')).result.trim(), '/opt/app')

  // Another tenant sees none of it and may not build.
  const bob = new Daytona({ apiKey: process.env.DAYTONA_OTHER_API_KEY, apiUrl: process.env.DAYTONA_API_URL })
  await assert.rejects(bob.snapshot.get(name), (e) => e instanceof DaytonaNotFoundError)
  assert.ok(!(await bob.snapshot.list()).items.some((s) => s.name === name))
  await assert.rejects(bob.create({ snapshot: name }), (e) => e.statusCode === 400 && /unknown template/.test(e.message))
  await assert.rejects(bob.snapshot.create({ name: `bob-${name}`, image: 'base' }), (e) => e.statusCode === 403)
  await assert.rejects(bob.snapshot.delete(name), (e) => e instanceof DaytonaNotFoundError)
  await assert.rejects(daytona.snapshot.delete('base'), (e) => e.statusCode === 403, 'shared templates are the operator\'s')

  await sb.delete()
  created.pop()
  await daytona.snapshot.delete(name)
  snapshots.pop()
  await assert.rejects(daytona.snapshot.get(name), (e) => e instanceof DaytonaNotFoundError)
})

test('snapshot from an image name and from a Dockerfile; a failing build', async () => {
  const name = `plain-${Date.now()}`
  const snap = await daytona.snapshot.create({ name, image: 'base' }, { timeout: 300 })
  snapshots.push(name)
  assert.equal(snap.state, 'active')
  assert.equal((await daytona.snapshot.get(name)).state, 'active')

  const dir = tempDir()
  fs.writeFileSync(path.join(dir, 'data.txt'), 'from the Dockerfile context\n')
  // Over the SDK's 5 MiB part size: uploaded in parts (S3 multipart).
  const big = crypto.randomBytes(6 << 20)
  fs.writeFileSync(path.join(dir, 'big.bin'), big)
  fs.writeFileSync(path.join(dir, 'Dockerfile'), 'FROM base\nCOPY data.txt /opt/data.txt\nCOPY big.bin /opt/big.bin\nENV FROM_DOCKERFILE=yes\n')
  const dname = `df-${Date.now()}`
  await daytona.snapshot.create({ name: dname, image: Image.fromDockerfile(path.join(dir, 'Dockerfile')) }, { timeout: 300 })
  snapshots.push(dname)
  const sb = await daytona.create({ snapshot: dname })
  created.push(sb)
  assert.equal((await sb.process.executeCommand('cat /opt/data.txt; echo $FROM_DOCKERFILE')).result.trim(),
    'from the Dockerfile context\nyes')
  assert.equal((await sb.process.executeCommand('sha256sum /opt/big.bin')).result.split(' ')[0],
    crypto.createHash('sha256').update(big).digest('hex'), 'a context over 5 MiB arrives whole')

  const logs = []
  const bad = `bad-${Date.now()}`
  snapshots.push(bad)
  await assert.rejects(
    daytona.snapshot.create({ name: bad, image: Image.base('base').runCommands('echo about to fail; exit 3') }, { onLogs: (l) => logs.push(l) }),
    (e) => /Failed to create snapshot/.test(e.message) && /non-zero code: 3/.test(e.message))
  assert.match(logs.join('\n'), /about to fail/)
  assert.equal((await daytona.snapshot.get(bad)).state, 'build_failed')
})

test('daytona.create({image}) builds, then creates', async () => {
  const tag = `${Date.now()}`
  const logs = []
  const image = Image.base('base').runCommands(`echo ${tag} > /opt/direct`).env({ DIRECT: 'yes' })
  const sb = await daytona.create({ image, labels: { direct: tag } }, { timeout: 600, onSnapshotCreateLogs: (l) => logs.push(l) })
  created.push(sb)
  // The image's snapshot is the tenant's, named after the image; the
  // test removes it (after the sandboxes) so the store does not grow.
  assert.match(sb.snapshot, /^daytona-image-[0-9a-f]{20}$/)
  snapshots.push(sb.snapshot)
  assert.equal((await daytona.snapshot.get(sb.snapshot)).state, 'active')
  assert.equal(sb.state, 'started')
  assert.match(logs.join('\n'), new RegExp(`RUN echo ${tag}`), 'the build log streamed')
  assert.equal((await sb.process.executeCommand('cat /opt/direct; echo $DIRECT')).result.trim(), `${tag}\nyes`)
  assert.equal((await daytona.get(sb.id)).labels.direct, tag, 'the rest of the request applied')

  // Without a log callback the SDK waits on the placeholder's record and
  // takes the sandbox's ID from it.
  const other = await daytona.create({ image: Image.base('base').runCommands(`echo other-${tag} > /opt/direct`) }, { timeout: 600 })
  created.push(other)
  snapshots.push(other.snapshot)
  assert.equal(other.state, 'started')
  assert.equal((await other.process.executeCommand('cat /opt/direct')).result.trim(), `other-${tag}`)

  // An image built before is not built again: the sandbox comes at once.
  const again = await daytona.create({ image }, { timeout: 60 })
  created.push(again)
  assert.notEqual(again.id, sb.id)
  assert.equal(again.snapshot, sb.snapshot)
  assert.equal((await again.process.executeCommand('cat /opt/direct')).result.trim(), tag)
})
