const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Sandbox, SandboxNotFoundError, NotFoundError } = require('e2b')
const { BASE, checkKernel } = require('./helpers.cjs')

test('create with metadata and envs, list and filter, getInfo, setTimeout, metrics, kill', async () => {
  const tag = `t${Date.now()}`
  const sbx = await Sandbox.create(BASE, { metadata: { suite: 'e2b', tag }, envs: { GREETING: 'hello-e2b' }, timeoutMs: 120_000 })
  try {
    await checkKernel(sbx)
    const r = await sbx.commands.run('echo "$GREETING"')
    assert.equal(r.stdout, 'hello-e2b\n')

    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.equal(info.state, 'running')
    assert.deepEqual(info.metadata, { suite: 'e2b', tag })

    // A second sandbox without the tag: the filter tells them apart.
    const other = await Sandbox.create(BASE, { metadata: { suite: 'e2b', tag: 'other' } })
    try {
      const found = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
      assert.deepEqual(found.map((s) => s.sandboxId), [sbx.sandboxId])
      const running = await Sandbox.list({ query: { metadata: { suite: 'e2b' }, state: ['running'] } }).nextItems()
      assert.ok(running.some((s) => s.sandboxId === other.sandboxId) && running.some((s) => s.sandboxId === sbx.sandboxId))
      const none = await Sandbox.list({ query: { state: ['paused'], metadata: { tag } } }).nextItems()
      assert.deepEqual(none, [])
      // Pages of one, with the next token.
      const pager = Sandbox.list({ query: { metadata: { suite: 'e2b' } }, limit: 1 })
      const first = await pager.nextItems()
      assert.equal(first.length, 1)
      assert.ok(pager.hasNext)
      const second = await pager.nextItems()
      assert.equal(second.length, 1)
      assert.notEqual(second[0].sandboxId, first[0].sandboxId)
    } finally {
      await other.kill()
    }

    const before = (await sbx.getInfo()).endAt
    await sbx.setTimeout(600_000)
    const after = (await sbx.getInfo()).endAt
    assert.ok(after.getTime() > before.getTime() + 300_000, `endAt ${before} -> ${after}`)

    const metrics = await sbx.getMetrics()
    assert.ok(metrics.length >= 1, `${metrics.length} points`)
    assert.ok(metrics[0].memUsed > 0 && metrics[0].memTotal >= metrics[0].memUsed, JSON.stringify(metrics))
    assert.ok(metrics[0].cpuCount >= 1)

    assert.ok(await sbx.isRunning())
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), (e) => e instanceof NotFoundError || e instanceof SandboxNotFoundError)
  const gone = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
  assert.deepEqual(gone, [])
})

test("another tenant's sandbox is not found", async () => {
  const other = process.env.E2B_OTHER_API_KEY
  assert.ok(other, 'E2B_OTHER_API_KEY is set by the driver')
  const sbx = await Sandbox.create(BASE)
  try {
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: other }), (e) => e instanceof NotFoundError || e instanceof SandboxNotFoundError)
    await assert.rejects(Sandbox.kill(sbx.sandboxId, { apiKey: other }).then((ok) => { if (!ok) throw new NotFoundError('not found') }))
    const theirs = await Sandbox.list({ apiKey: other }).nextItems()
    assert.ok(!theirs.some((s) => s.sandboxId === sbx.sandboxId))
    // Connecting with their key fails too; ours works and sees the same sandbox.
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: other }))
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await again.commands.run('echo same')).stdout, 'same\n')
  } finally {
    await sbx.kill()
  }
})

test('a wrong key is refused', async () => {
  await assert.rejects(Sandbox.create(BASE, { apiKey: 'e2b_0123456789abcdef0123456789abcdef' }), (e) => /401|auth|Unauthorized|invalid API key/i.test(String(e)))
})
