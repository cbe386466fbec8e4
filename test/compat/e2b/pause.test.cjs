const { test } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { Sandbox } = require('@e2b/code-interpreter')
const { waitFor } = require('./helpers.cjs')

function get(host, token) {
  const u = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.get({ host: u.hostname, port: u.port, path: '/', headers: { Host: host, 'X-Access-Token': token } }, (res) => {
      let body = ''
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')))
  })
}

test('pause then connect keeps a running HTTP server and a Python variable', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  try {
    await sbx.runCode('kept = 6 * 7')
    const script = 'import http.server as h, itertools\nc = itertools.count()\nclass H(h.BaseHTTPRequestHandler):\n  def do_GET(s):\n    s.send_response(200); s.end_headers(); s.wfile.write(b"hit %d" % next(c))\nh.HTTPServer(("127.0.0.1", 8080), H).serve_forever()\n'
    await sbx.files.write('/tmp/srv.py', script)
    await sbx.commands.run('python3 /tmp/srv.py', { background: true })
    const host = sbx.getHost(8080)
    await waitFor(async () => (await get(host, sbx.envdAccessToken).catch(() => ({}))).status === 200, 20_000, 'the server')
    assert.equal((await get(host, sbx.envdAccessToken)).body, 'hit 1')

    assert.equal(await sbx.pause(), true)
    assert.equal(await sbx.pause(), false, 'a paused sandbox is not paused again')
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info.state, 'paused')
    const listed = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId))
    assert.equal((await get(host, sbx.envdAccessToken)).status, 409)

    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
    // The same server process, its counter where it was.
    assert.equal((await get(host, back.envdAccessToken)).body, 'hit 2')
    assert.equal((await back.runCode('kept')).text, '42')
  } finally {
    await sbx.kill()
  }
})

test('autoPause pauses at the timeout instead of killing', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, lifecycle: { onTimeout: 'pause' } })
  try {
    await sbx.runCode('survivor = "yes"')
    await sbx.setTimeout(1_000) // then the timeout comes
    await waitFor(async () => (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused', 30_000, 'the auto-pause')
    const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
    assert.equal((await back.runCode('survivor')).text, 'yes')
  } finally {
    await sbx.kill()
  }
})
