// Volumes, snapshots and fork with the unmodified e2b SDK. The actor is
// E2B_OTHER_API_KEY's tenant (not a template admin, so its snapshots are
// private); E2B_THIRD_API_KEY's tenant is the stranger who must see none
// of it.
const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Sandbox, Volume } = require('e2b')

const apiKey = process.env.E2B_OTHER_API_KEY
const stranger = process.env.E2B_THIRD_API_KEY
assert.ok(apiKey && stranger, 'the driver sets E2B_OTHER_API_KEY and E2B_THIRD_API_KEY')
const as = { apiKey }
const asStranger = { apiKey: stranger }

async function sh(sbx, cmd) {
  const r = await sbx.commands.run(cmd)
  return r.stdout
}

test('a volume: content without a sandbox, shared by two sandboxes, destroy refused while mounted, unknown to another tenant', async () => {
  const name = `vol-${Date.now()}`
  const vol = await Volume.create(name, as)
  assert.equal(vol.name, name)
  assert.ok(vol.volumeId && vol.token)
  const other = await Volume.create(`${name}-2`, as)
  let a, b
  try {
    // Content without any sandbox.
    await vol.makeDir('/docs')
    const st = await vol.writeFile('/docs/readme.txt', 'from the API')
    assert.equal(st.type, 'file')
    assert.equal(st.size, 12)
    assert.equal(await vol.readFile('/docs/readme.txt'), 'from the API')
    assert.deepEqual(Buffer.from(await vol.readFile('/docs/readme.txt', { format: 'bytes' })).toString(), 'from the API')
    assert.equal((await vol.getInfo('/docs')).type, 'directory')
    assert.equal(await vol.exists('/docs/none'), false)
    await vol.writeFile('/docs/deep/x.txt', 'x')
    const names = (await vol.list('/docs', { depth: 2 })).map((e) => e.path).sort()
    assert.deepEqual(names, ['/docs/deep', '/docs/deep/x.txt', '/docs/readme.txt'])
    await vol.remove('/docs/deep')
    assert.equal(await vol.exists('/docs/deep'), false)
    const connected = await Volume.connect(vol.volumeId, as)
    assert.equal(connected.name, name)
    assert.equal(await connected.readFile('/docs/readme.txt'), 'from the API')
    assert.ok((await Volume.list(as)).some((v) => v.volumeId === vol.volumeId && v.name === name))
    assert.equal((await Volume.getInfo(vol.volumeId, as)).name, name)

    // One volume's token does not open another.
    const forged = new Volume(other.volumeId, other.name, vol.token, vol.domain)
    await assert.rejects(forged.readFile('/docs/readme.txt'), /invalid volume token/)

    // Mounted into two sandboxes at once: a write in one is read in the other.
    a = await Sandbox.create('base', { ...as, volumeMounts: { '/mnt/shared': vol } })
    b = await Sandbox.create('base', { ...as, volumeMounts: { '/mnt/shared': name } })
    assert.equal(await sh(a, 'cat /mnt/shared/docs/readme.txt'), 'from the API')
    await a.commands.run('echo from-a > /mnt/shared/a.txt')
    assert.equal(await sh(b, 'cat /mnt/shared/a.txt'), 'from-a\n')
    await b.commands.run('echo from-b > /mnt/shared/b.txt')
    assert.equal(await vol.readFile('/b.txt'), 'from-b\n')
    const info = await Sandbox.getInfo(a.sandboxId, as)
    assert.deepEqual(info.volumeMounts, [{ name, path: '/mnt/shared' }])

    // Refused while mounted (409: the SDK throws), nothing lost.
    await assert.rejects(Volume.destroy(vol.volumeId, as), /mount/)
    assert.equal(await vol.readFile('/b.txt'), 'from-b\n')

    // Another tenant: not listed, not found, its content not reachable
    // with its own key, not mountable by name.
    assert.ok(!(await Volume.list(asStranger)).some((v) => v.volumeId === vol.volumeId))
    await assert.rejects(Volume.getInfo(vol.volumeId, asStranger), (e) => e.name === 'VolumeNotFoundError')
    assert.equal(await Volume.destroy(vol.volumeId, asStranger), false)
    const theirs = new Volume(vol.volumeId, name, stranger, vol.domain)
    await assert.rejects(theirs.readFile('/b.txt'))
    await assert.rejects(theirs.writeFile('/evil.txt', 'x'))
    await assert.rejects(Sandbox.create('base', { ...asStranger, volumeMounts: { '/mnt/x': name } }))
    assert.equal(await vol.exists('/evil.txt'), false)
  } finally {
    if (a) await a.kill()
    if (b) await b.kill()
  }
  assert.equal(await Volume.destroy(vol.volumeId, as), true)
  assert.equal(await Volume.destroy(other.volumeId, as), true)
  assert.equal(await Volume.destroy(vol.volumeId, as), false)
  assert.ok(!(await Volume.list(as)).some((v) => v.volumeId === vol.volumeId))
})

test('a snapshot: create from it keeps files; listed, deleted; another tenant cannot use it', async () => {
  const sbx = await Sandbox.create('base', { ...as, timeoutMs: 300_000 })
  let fromSnap
  let snap
  try {
    await sbx.files.write('/home/user/kept.txt', 'snapshotted')
    await sbx.commands.run('mkdir -p /home/user/p && echo proj > /home/user/p/f')
    snap = await sbx.createSnapshot()
    assert.ok(snap.snapshotId)
    assert.deepEqual(snap.names, [snap.snapshotId])
    const mine = await sbx.listSnapshots().nextItems()
    assert.ok(mine.some((s) => s.snapshotId === snap.snapshotId), 'listed as the sandbox\'s snapshot')
    const all = await Sandbox.listSnapshots(as).nextItems()
    assert.ok(all.some((s) => s.snapshotId === snap.snapshotId))
    // The source keeps running.
    assert.equal(await sh(sbx, 'cat /home/user/kept.txt'), 'snapshotted')

    fromSnap = await Sandbox.create(snap.snapshotId, { ...as, timeoutMs: 120_000 })
    assert.equal(await fromSnap.files.read('/home/user/kept.txt'), 'snapshotted')
    assert.equal(await sh(fromSnap, 'cat /home/user/p/f'), 'proj\n')

    // Another tenant: not listed, cannot start from it or delete it.
    assert.ok(!(await Sandbox.listSnapshots(asStranger).nextItems()).some((s) => s.snapshotId === snap.snapshotId))
    await assert.rejects(Sandbox.create(snap.snapshotId, asStranger))
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, asStranger), false)
    await assert.rejects(Sandbox.createSnapshot(sbx.sandboxId, asStranger), (e) => e.name === 'SandboxNotFoundError')
  } finally {
    if (fromSnap) await fromSnap.kill()
    await sbx.kill()
  }
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, as), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, as), false)
  assert.ok(!(await Sandbox.listSnapshots(as).nextItems()).some((s) => s.snapshotId === snap.snapshotId))
})

test('fork({count: 5}) gives five independent copies while the source keeps running', async () => {
  const src = await Sandbox.create('base', { ...as, timeoutMs: 300_000, envs: { FORK_ENV: 'carried' }, metadata: { team: 'a' } })
  let forks = []
  try {
    await src.commands.run('echo state-1 > /home/user/f && (sleep 600 >/dev/null 2>&1 &)')
    forks = await src.fork({ count: 5, timeoutMs: 120_000 })
    assert.equal(forks.length, 5)
    for (const f of forks) assert.ok(!(f instanceof Error), `a fork failed: ${f}`)
    const ids = new Set(forks.map((f) => f.sandboxId))
    assert.equal(ids.size, 5)
    assert.ok(!ids.has(src.sandboxId))
    for (const [i, f] of forks.entries()) {
      assert.equal(await sh(f, 'cat /home/user/f; echo $FORK_ENV'), 'state-1\ncarried\n')
      await f.commands.run(`echo fork-${i} > /home/user/f`)
      assert.equal((await Sandbox.getInfo(f.sandboxId, as)).metadata.team, 'a')
    }
    for (const [i, f] of forks.entries()) {
      assert.equal(await f.files.read('/home/user/f'), `fork-${i}\n`, 'each fork is its own copy')
    }
    assert.equal(await sh(src, 'cat /home/user/f; pgrep -x sleep >/dev/null && echo still-running'), 'state-1\nstill-running\n')
    assert.equal((await Sandbox.getInfo(src.sandboxId, as)).state, 'running')
    await assert.rejects(Sandbox.fork(src.sandboxId, { ...asStranger, count: 1 }), (e) => e.name === 'SandboxNotFoundError')
  } finally {
    for (const f of forks) if (!(f instanceof Error)) await f.kill()
    await src.kill()
  }
})
