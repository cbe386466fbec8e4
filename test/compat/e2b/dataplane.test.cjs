const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { Sandbox } = require('e2b')
const { waitFor, BASE, lacks, checkKernel } = require('./helpers.cjs')

let sbx
before(async () => { sbx = await Sandbox.create(BASE); await checkKernel(sbx) })
after(async () => { await sbx?.kill() })

// get sends GET path to the daemon with headers (Host included: the
// <port>-<id>.<domain> form needs no DNS that way).
function get(path, headers) {
  const u = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.get({ host: u.hostname, port: u.port, path, headers }, (res) => {
      let body = ''
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')))
  })
}

test('the data plane wants the access token', async () => {
  const id = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
  assert.equal((await get('/health', id)).status, 401)
  assert.equal((await get('/health', { ...id, 'X-Access-Token': 'wrong' })).status, 401)
  assert.equal((await get('/health', { ...id, 'X-Access-Token': sbx.envdAccessToken })).status, 204)
  // The agent's own routes are not E2B's.
  assert.equal((await get('/service', { ...id, 'X-Access-Token': sbx.envdAccessToken })).status, 404)
  // The host form reaches the same agent.
  const host = sbx.getHost(49983)
  assert.equal((await get('/health', { Host: host })).status, 401)
  assert.equal((await get('/health', { Host: host, 'X-Access-Token': sbx.envdAccessToken })).status, 204)
})

test('any other port is the preview proxy', { skip: lacks('no_ports') }, async () => {
  await sbx.commands.run('mkdir -p /tmp/www && echo served > /tmp/www/index.html')
  const srv = await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1', { background: true, cwd: '/tmp/www' })
  try {
    const host = sbx.getHost(8000)
    await waitFor(async () => (await get('/index.html', { Host: host, 'X-Access-Token': sbx.envdAccessToken })).status === 200, 20_000, 'the server in the sandbox')
    const r = await get('/index.html', { Host: host, 'X-Access-Token': sbx.envdAccessToken })
    assert.equal(r.body, 'served\n')
    assert.equal((await get('/index.html', { Host: host })).status, 401)
    // E2B's traffic token, as E2B documents it for restricted ports.
    assert.ok(sbx.trafficAccessToken)
    assert.equal((await get('/index.html', { Host: host, 'E2B-Traffic-Access-Token': sbx.trafficAccessToken })).body, 'served\n')
    assert.equal((await get('/index.html', { Host: host, 'E2B-Traffic-Access-Token': 'wrong' })).status, 401)
  } finally {
    await srv.kill()
  }
})
