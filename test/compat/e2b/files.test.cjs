const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const { Sandbox, FilesystemEventType, NotFoundError } = require('e2b')
const { waitFor, BASE, checkKernel } = require('./helpers.cjs')

let sbx
before(async () => { sbx = await Sandbox.create(BASE); await checkKernel(sbx) })
after(async () => { await sbx?.kill() })

test('write, read, list, exists, makeDir, rename, remove', async () => {
  const dir = '/home/user/e2b'
  assert.equal(await sbx.files.makeDir(dir), true)
  assert.equal(await sbx.files.makeDir(dir), false)
  const info = await sbx.files.write(`${dir}/a.txt`, 'alpha')
  assert.equal(info.path, `${dir}/a.txt`)
  assert.equal(await sbx.files.read(`${dir}/a.txt`), 'alpha')
  const bytes = await sbx.files.read(`${dir}/a.txt`, { format: 'bytes' })
  assert.deepEqual(Buffer.from(bytes), Buffer.from('alpha'))
  await sbx.files.write(`${dir}/sub/deep.txt`, 'made with its parents')
  const names = (await sbx.files.list(dir)).map((e) => `${e.name}:${e.type}`).sort()
  assert.deepEqual(names, ['a.txt:file', 'sub:dir'])
  assert.equal(await sbx.files.exists(`${dir}/a.txt`), true)
  assert.equal(await sbx.files.exists(`${dir}/nope`), false)
  const moved = await sbx.files.rename(`${dir}/a.txt`, `${dir}/b.txt`)
  assert.equal(moved.name, 'b.txt')
  assert.equal(await sbx.files.exists(`${dir}/a.txt`), false)
  await sbx.files.remove(`${dir}/b.txt`)
  assert.equal(await sbx.files.exists(`${dir}/b.txt`), false)
  await assert.rejects(sbx.files.read(`${dir}/b.txt`), (e) => e instanceof NotFoundError)
  // Several files at once.
  await sbx.files.write([{ path: `${dir}/m1`, data: 'one' }, { path: `${dir}/m2`, data: 'two' }])
  assert.equal(await sbx.files.read(`${dir}/m2`), 'two')
})

test('watchDir reports creates and writes', async () => {
  const dir = '/home/user/watched'
  await sbx.files.makeDir(dir)
  const events = []
  const h = await sbx.files.watchDir(dir, (ev) => events.push(ev))
  try {
    await sbx.files.write(`${dir}/new.txt`, 'x')
    await waitFor(() => events.some((e) => e.name === 'new.txt' && (e.type === FilesystemEventType.CREATE || e.type === FilesystemEventType.WRITE)), 10_000, 'a watch event')
  } finally {
    await h.stop()
  }
})

test('a 200 MB upload and download', async () => {
  const size = 200 << 20
  const data = Buffer.alloc(size)
  crypto.randomFillSync(data)
  const want = crypto.createHash('sha256').update(data).digest('hex')
  await sbx.files.write('/home/user/big.bin', new Blob([data]))
  const sum = await sbx.commands.run('sha256sum /home/user/big.bin', { timeoutMs: 120_000 })
  assert.equal(sum.stdout.split(' ')[0], want)
  const stream = await sbx.files.read('/home/user/big.bin', { format: 'stream' })
  const h = crypto.createHash('sha256')
  let n = 0
  for await (const chunk of stream) { h.update(chunk); n += chunk.length }
  assert.equal(n, size)
  assert.equal(h.digest('hex'), want)
})
