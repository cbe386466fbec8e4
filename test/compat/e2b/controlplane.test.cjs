// E2B's control plane beyond create/kill (issue 30): timeouts, listing,
// metrics ranges and signed file URLs, with the unmodified SDK.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Sandbox, SandboxNotFoundError, TimeoutError } = require('e2b')
const { BASE, waitFor } = require('./helpers.cjs')

test('a shortened timeout keeps the sandbox until the new deadline, then it is not running', async () => {
  const sbx = await Sandbox.create(BASE, { timeoutMs: 120_000 })
  try {
    const t0 = Date.now()
    await sbx.setTimeout(8_000)
    // Still there, and usable, right after the shortening.
    assert.equal((await sbx.commands.run('echo still')).stdout, 'still\n')
    const info = await sbx.getInfo()
    const left = info.endAt.getTime() - t0
    assert.ok(left > 5_000 && left < 12_000, `endAt ${info.endAt.toISOString()} is ${left} ms away, want about 8 s`)
    assert.ok(await sbx.isRunning())
    // Shortening again, then lengthening: the last call wins.
    await sbx.setTimeout(3_000)
    await new Promise((r) => setTimeout(r, 1_000))
    await sbx.setTimeout(9_000)
    await new Promise((r) => setTimeout(r, 3_000))
    assert.equal((await sbx.commands.run('echo again')).stdout, 'again\n')
    // After the deadline it is not running (E2B: isRunning() is false, not
    // an error), and using it raises the errors the SDK documents for an
    // ended sandbox, not a missing file's.
    await waitFor(async () => !(await sbx.isRunning({ requestTimeoutMs: 5_000 })), 20_000, 'the sandbox to end at its deadline')
    assert.ok(Date.now() - t0 >= 9_000, `ended after ${Date.now() - t0} ms, before its deadline`)
    await assert.rejects(sbx.commands.run('true'), (e) => e instanceof SandboxNotFoundError && /not running/.test(e.message), 'a command in an ended sandbox')
    await assert.rejects(sbx.files.read('/etc/hostname'), (e) => e instanceof TimeoutError, 'a read in an ended sandbox')
    await assert.rejects(sbx.files.exists('/etc/hostname'), (e) => e instanceof TimeoutError, 'exists in an ended sandbox')
    await assert.rejects(Sandbox.connect(sbx.sandboxId), (e) => e instanceof SandboxNotFoundError)
  } finally {
    await sbx.kill().catch(() => {})
  }
})

test('list: order, pages in that order, startedAfter and the template filter', async () => {
  const tag = `l${Date.now()}`
  const a = await Sandbox.create(BASE, { metadata: { tag } })
  let b
  try {
    // Apart in time, so startedAfter can tell them apart.
    await new Promise((r) => setTimeout(r, 50))
    b = await Sandbox.create('code-interpreter-v1', { metadata: { tag } })
    const ids = (items) => items.map((s) => s.sandboxId)
    const list = (opts) => Sandbox.list({ ...opts, query: { metadata: { tag }, ...opts.query } }).nextItems()

    assert.deepEqual(ids(await list({})), [b.sandboxId, a.sandboxId], 'newest first by default')
    assert.deepEqual(ids(await list({ order: 'desc' })), [b.sandboxId, a.sandboxId], 'desc')
    assert.deepEqual(ids(await list({ order: 'asc' })), [a.sandboxId, b.sandboxId], 'asc')

    // Ascending pages of one: the order holds across pages.
    const pager = Sandbox.list({ query: { metadata: { tag } }, order: 'asc', limit: 1 })
    assert.deepEqual(ids(await pager.nextItems()), [a.sandboxId])
    assert.ok(pager.hasNext)
    assert.deepEqual(ids(await pager.nextItems()), [b.sandboxId])
    assert.ok(!pager.hasNext)

    const infoB = await b.getInfo()
    assert.deepEqual(ids(await list({ query: { startedAfter: infoB.startedAt } })), [b.sandboxId], 'startedAfter B')
    assert.deepEqual(ids(await list({ query: { startedAfter: new Date(Date.now() + 60_000) } })), [], 'startedAfter the future')

    assert.deepEqual(ids(await list({ query: { template: 'code-interpreter-v1' } })), [b.sandboxId], 'template code-interpreter-v1')
    assert.deepEqual(ids(await list({ query: { template: 'base' } })), [a.sandboxId], 'template base')
    assert.deepEqual(ids(await list({ query: { template: 'no-such-template' } })), [], 'an unknown template')
    // Filters combine with state.
    assert.deepEqual(ids(await list({ query: { template: 'base', state: ['paused'] } })), [])
  } finally {
    await a.kill()
    if (b) await b.kill()
  }
})

test('getMetrics returns only points inside start/end', async () => {
  const sbx = await Sandbox.create(BASE)
  try {
    const now = Date.now()
    const inside = await sbx.getMetrics({ start: new Date(now - 60_000), end: new Date(now + 60_000) })
    assert.ok(inside.length >= 1, 'a range around now has a point')
    for (const m of inside) {
      const t = m.timestamp.getTime()
      assert.ok(t >= now - 61_000 && t <= now + 61_000, `point at ${m.timestamp.toISOString()} outside the range`)
      assert.ok(m.memUsed > 0)
    }
    // Before the sandbox existed, and in the future: nothing.
    assert.deepEqual(await sbx.getMetrics({ start: new Date(now - 3_600_000), end: new Date(now - 1_800_000) }), [])
    assert.deepEqual(await sbx.getMetrics({ start: new Date(now + 600_000) }), [])
    assert.ok((await sbx.getMetrics({ end: new Date(now + 60_000) })).length >= 1, 'only an end after now')
  } finally {
    await sbx.kill()
  }
})

test('signed file URLs: download and upload without credentials; expired, tampered and misused ones are 401', async () => {
  const sbx = await Sandbox.create(BASE)
  const other = await Sandbox.create(BASE)
  try {
    const path = '/tmp/signed.txt'
    await sbx.files.write(path, 'signed hello')

    // Plain fetches, no headers: the URL alone authorizes.
    const get = async (url) => { const r = await fetch(url); return { status: r.status, body: await r.text() } }
    let r = await get(await sbx.downloadUrl(path))
    assert.equal(r.status, 200, r.body)
    assert.equal(r.body, 'signed hello')
    r = await get(await sbx.downloadUrl(path, { user: 'user' }))
    assert.equal(r.status, 200, r.body)
    assert.equal(r.body, 'signed hello')
    r = await get(await sbx.downloadUrl(path, { useSignatureExpiration: 120 }))
    assert.equal(r.status, 200, r.body)
    assert.equal(r.body, 'signed hello')

    // Expired, tampered (another path, another user, a changed signature,
    // a later expiration), or signed with another sandbox's token: 401.
    const expired = await sbx.downloadUrl(path, { useSignatureExpiration: -5 })
    assert.equal((await get(expired)).status, 401, 'expired')
    const good = new URL(await sbx.downloadUrl(path, { useSignatureExpiration: 120 }))
    const tamper = (fn) => { const u = new URL(good); fn(u.searchParams); return u.toString() }
    assert.equal((await get(tamper((q) => q.set('path', '/etc/passwd')))).status, 401, 'another path')
    assert.equal((await get(tamper((q) => q.set('username', 'root')))).status, 401, 'another user')
    assert.equal((await get(tamper((q) => q.set('signature_expiration', String(Number(q.get('signature_expiration')) + 3600))))).status, 401, 'a later expiration')
    assert.equal((await get(tamper((q) => q.set('signature', q.get('signature').slice(0, -2) + 'AA')))).status, 401, 'another signature')
    assert.equal((await get(tamper((q) => q.delete('signature')))).status, 401, 'no signature')
    assert.equal((await get(await other.downloadUrl(path))).status, 404, "the other sandbox's URL reads its own (missing) file")

    // Upload: a multipart POST to the upload URL, read back with the SDK.
    const up = await sbx.uploadUrl('/tmp/uploaded.txt')
    const form = new FormData()
    form.append('file', new Blob(['uploaded through a signed URL']), 'uploaded.txt')
    const res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.text())
    assert.equal(await sbx.files.read('/tmp/uploaded.txt'), 'uploaded through a signed URL')
    // A read URL does not write, a write URL does not read.
    const form2 = new FormData()
    form2.append('file', new Blob(['nope']), 'signed.txt')
    assert.equal((await fetch(await sbx.downloadUrl(path), { method: 'POST', body: form2 })).status, 401, 'a read URL used to write')
    assert.equal((await get(up)).status, 401, 'a write URL used to read')
    assert.equal(await sbx.files.read(path), 'signed hello')
  } finally {
    await sbx.kill()
    await other.kill()
  }
})
