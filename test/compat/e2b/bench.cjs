// Round trips of the E2B SDKs through an agentbox daemon, next to the same
// operations on agentbox's native API (raw HTTP from the same Node
// process) as the reference. Driven by BenchmarkE2BSDK (test/e2e); prints
// one JSON object of {name: {n, p50, p90}} in milliseconds.
const { Sandbox } = require('e2b')
const CI = require('@e2b/code-interpreter')

const N = Number(process.env.E2B_BENCH_N || 20)
const base = process.env.E2B_API_URL

async function native(method, path, body) {
  const res = await fetch(base + path, { method, headers: { 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text && (res.headers.get('content-type') || '').startsWith('application/json') ? JSON.parse(text) : text
}

function stats(ms) {
  const s = [...ms].sort((a, b) => a - b)
  const q = (p) => Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))] * 100) / 100
  return { n: s.length, p50: q(0.5), p90: q(0.9) }
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
  // Warm both paths once.
  await (await Sandbox.create('base')).kill()
  const created = []
  r['e2b Sandbox.create(base)'] = stats(await timed(N, async () => { created.push(await Sandbox.create('base')) }))
  for (const s of created) await s.kill()
  const nativeIDs = []
  r['native POST /v1/sandboxes (base)'] = stats(await timed(N, async () => { nativeIDs.push((await native('POST', '/v1/sandboxes', { template: 'base' })).id) }))
  for (const id of nativeIDs) await native('DELETE', `/v1/sandboxes/${id}`)

  const sbx = await Sandbox.create('base', { timeoutMs: 600_000 })
  await sbx.commands.run('true')
  r["e2b commands.run('true')"] = stats(await timed(5 * N, () => sbx.commands.run('true')))
  r['native POST /v1/sandboxes/{id}/exec true'] = stats(await timed(5 * N, () => native('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: ['true'] })))
  // What the SDK runs: its command in a bash login shell.
  r['native POST /v1/sandboxes/{id}/exec bash -l -c true'] = stats(await timed(5 * N, () => native('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: ['/bin/bash', '-l', '-c', 'true'] })))
  const pauses = [], resumes = []
  for (let i = 0; i < N; i++) {
    let t = performance.now(); await sbx.pause(); pauses.push(performance.now() - t)
    t = performance.now(); await Sandbox.connect(sbx.sandboxId); resumes.push(performance.now() - t)
  }
  r['e2b sbx.pause()'] = stats(pauses)
  r['e2b Sandbox.connect() of a paused sandbox (resume)'] = stats(resumes)
  r['e2b Sandbox.getInfo()'] = stats(await timed(N, () => Sandbox.getInfo(sbx.sandboxId)))
  await sbx.kill()

  const ci = await CI.Sandbox.create({ timeoutMs: 600_000 })
  await ci.runCode('1+1')
  r["e2b runCode('1+1')"] = stats(await timed(5 * N, () => ci.runCode('1+1')))
  r['native POST /v1/sandboxes/{id}/code 1+1'] = stats(await timed(5 * N, () => native('POST', `/v1/sandboxes/${ci.sandboxId}/code`, { code: '1+1' })))
  await ci.kill()
  console.log(JSON.stringify(r))
})().catch((e) => { console.error(e); process.exit(1) })
