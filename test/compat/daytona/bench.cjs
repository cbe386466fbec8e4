// Round trips of the Daytona SDK through an agentbox daemon, next to the
// same operations through the E2B SDK against the same daemon. Driven by
// BenchmarkDaytonaSDK (test/e2e); prints one JSON object of
// {name: {n, p50, p99}} in milliseconds.
const { Daytona } = require('@daytonaio/sdk')
const { Sandbox } = require('e2b')

const N = Number(process.env.DAYTONA_BENCH_N || 50)

function stats(ms) {
  const s = [...ms].sort((a, b) => a - b)
  const q = (p) => Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))] * 100) / 100
  return { n: s.length, p50: q(0.5), p99: q(0.99) }
}

async function timed(n, fn) {
  const out = []
  for (let i = 0; i < n; i++) {
    const t = performance.now()
    await fn(i)
    out.push(performance.now() - t)
  }
  return out
}

;(async () => {
  const r = {}
  const daytona = new Daytona()
  await (await daytona.create({ snapshot: 'base' })).delete()
  await (await Sandbox.create('base')).kill()

  // Each create is timed alone; the sandbox is removed untimed after it
  // (the daemon caps sandboxes per user).
  async function creates(make, remove) {
    const ms = []
    for (let i = 0; i < N; i++) {
      const t = performance.now()
      const sb = await make()
      ms.push(performance.now() - t)
      await remove(sb)
    }
    return stats(ms)
  }
  r['daytona create(base)'] = await creates(() => daytona.create({ snapshot: 'base' }), (s) => s.delete())
  r['e2b Sandbox.create(base)'] = await creates(() => Sandbox.create('base'), (s) => s.kill())
  const d = await daytona.create({ snapshot: 'base' })
  const e = await Sandbox.create('base')
  r["daytona process.executeCommand('true')"] = stats(await timed(N, async () => { await d.process.executeCommand('true') }))
  r["e2b commands.run('true')"] = stats(await timed(N, async () => { await e.commands.run('true') }))
  r["daytona process.codeRun('print(1+1)')"] = stats(await timed(N, async () => { await d.process.codeRun('print(1+1)') }))
  await d.delete()
  await e.kill()
  process.stdout.write(JSON.stringify(r) + '\n')
  process.exit(0)
})().catch((err) => { console.error(err); process.exit(1) })
