// Sessions (state carried between commands, async commands, status and
// logs) and git (clone from a repository served over HTTP on the
// sandbox's loopback by an async session command, add, commit, status,
// branches, checkout, history) through the unmodified @daytonaio/sdk.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { Daytona } = require('@daytonaio/sdk')

const daytona = new Daytona()
const created = []
after(async () => {
  for (const sb of created) await sb.delete().catch(() => {})
  setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref()
})

async function waitFor(cond, ms, what) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await cond()) return
    await new Promise((r) => setTimeout(r, 100))
  }
  assert.fail(`timed out after ${ms} ms waiting for ${what}`)
}

test('sessions: input to a runAsync command', async () => {
  const sb = await daytona.create()
  created.push(sb)
  await sb.process.createSession('in')
  const c = await sb.process.executeSessionCommand('in', { command: 'read -r a; read -r b; echo "got $a and $b"', runAsync: true })
  await sb.process.sendSessionCommandInput('in', c.cmdId, 'one\n')
  await sb.process.sendSessionCommandInput('in', c.cmdId, 'two\n')
  await waitFor(async () => (await sb.process.getSessionCommand('in', c.cmdId)).exitCode !== undefined, 20000, 'the command reading its input')
  assert.equal((await sb.process.getSessionCommandLogs('in', c.cmdId)).stdout, 'got one and two\n')
  // Ended: Daytona's conflict.
  await assert.rejects(sb.process.sendSessionCommandInput('in', c.cmdId, 'late\n'), (e) => e.statusCode === 409)
  // A sync command reads no stdin (end of file at once).
  const r = await sb.process.executeSessionCommand('in', { command: 'cat; echo "rc=$?"' })
  assert.equal(r.stdout, 'rc=0\n')
  await assert.rejects(sb.process.sendSessionCommandInput('in', 'nosuch', 'x'), (e) => e.statusCode === 404)
})

test('sessions: state between commands, sync and async, status, logs, delete', async () => {
  const sb = await daytona.create()
  created.push(sb)
  await sb.process.createSession('s1')
  let r = await sb.process.executeSessionCommand('s1', { command: 'cd /tmp && export GREETING=hi' })
  assert.equal(r.exitCode, 0)
  r = await sb.process.executeSessionCommand('s1', { command: 'echo "$PWD $GREETING"; echo oops >&2; exit 4' })
  assert.equal(r.exitCode, 4)
  assert.equal(r.stdout, '/tmp hi\n')
  assert.equal(r.stderr, 'oops\n')

  const a = await sb.process.executeSessionCommand('s1', { command: 'echo start; sleep 1; echo end', runAsync: true })
  assert.ok(a.cmdId)
  assert.equal(a.exitCode, undefined)
  await waitFor(async () => (await sb.process.getSessionCommand('s1', a.cmdId)).exitCode !== undefined, 20000, 'the async command')
  assert.equal((await sb.process.getSessionCommand('s1', a.cmdId)).exitCode, 0)
  const logs = await sb.process.getSessionCommandLogs('s1', a.cmdId)
  assert.equal(logs.stdout, 'start\nend\n')

  // Followed logs: what came before the follow, then each line as it
  // comes, stdout and stderr apart, until the command ends.
  const f = await sb.process.executeSessionCommand('s1', { command: 'echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three', runAsync: true })
  await new Promise((r) => setTimeout(r, 200))
  let out = '', err = ''
  await sb.process.getSessionCommandLogs('s1', f.cmdId, (t) => { out += t }, (t) => { err += t })
  assert.equal(out, 'one\nthree\n')
  assert.equal(err, 'two\n')
  assert.equal((await sb.process.getSessionCommand('s1', f.cmdId)).exitCode, 0)

  const s = await sb.process.getSession('s1')
  assert.equal(s.sessionId, 's1')
  assert.equal(s.commands.length, 4)
  assert.deepEqual((await sb.process.listSessions()).map((x) => x.sessionId), ['s1'])
  await sb.process.deleteSession('s1')
  await assert.rejects(sb.process.getSession('s1'), (e) => e.statusCode === 404)
})

test('git: clone over loopback HTTP, add, commit, status, branches, checkout, history', async () => {
  const sb = await daytona.create()
  created.push(sb)
  // A repository with one commit, served by git's dumb HTTP protocol.
  const setup = await sb.process.executeCommand([
    'set -e', 'mkdir -p /tmp/src /tmp/srv', 'cd /tmp/src', 'git init -q -b main .',
    'echo one > README.md', 'git add README.md', 'git -c user.name=t -c user.email=t@x commit -qm first',
    'git clone -q --bare /tmp/src /tmp/srv/repo.git', 'git -C /tmp/srv/repo.git update-server-info',
  ].join('\n'))
  assert.equal(setup.exitCode, 0, setup.result)
  await sb.process.createSession('srv')
  await sb.process.executeSessionCommand('srv', { command: 'python3 -m http.server 8765 --bind 127.0.0.1 -d /tmp/srv', runAsync: true })
  await waitFor(async () => (await sb.process.executeCommand('curl -sf http://127.0.0.1:8765/repo.git/HEAD')).exitCode === 0, 20000, 'the HTTP server')

  const repo = '/home/user/repo'
  await sb.git.clone('http://127.0.0.1:8765/repo.git', repo)
  let st = await sb.git.status(repo)
  assert.equal(st.currentBranch, 'main')
  assert.deepEqual(st.fileStatus, [])

  await sb.fs.uploadFile(Buffer.from('two\n'), `${repo}/new.txt`)
  st = await sb.git.status(repo)
  assert.deepEqual(st.fileStatus.map((f) => [f.name, f.worktree]), [['new.txt', 'Untracked']])
  await sb.git.add(repo, ['new.txt'])
  st = await sb.git.status(repo)
  assert.deepEqual(st.fileStatus.map((f) => [f.name, f.staging]), [['new.txt', 'Added']])
  const { sha } = await sb.git.commit(repo, 'second', 'Ada', 'ada@example.com')
  assert.match(sha, /^[0-9a-f]{40}$/)
  st = await sb.git.status(repo)
  assert.equal(st.ahead, 1)

  await sb.git.createBranch(repo, 'feature')
  assert.deepEqual((await sb.git.branches(repo)).branches.sort(), ['feature', 'main'])
  await sb.git.checkoutBranch(repo, 'feature')
  assert.equal((await sb.git.status(repo)).currentBranch, 'feature')
  await sb.git.checkoutBranch(repo, 'main')
  await sb.git.deleteBranch(repo, 'feature')
  assert.deepEqual((await sb.git.branches(repo)).branches, ['main'])
  await assert.rejects(sb.git.clone('http://127.0.0.1:1/none.git', '/home/user/none'), (e) => e.statusCode === 400)
  await sb.process.deleteSession('srv')
})

test('previews: getPreviewLink with x-daytona-preview-token, getSignedPreviewUrl, refused without a token', async () => {
  const sb = await daytona.create()
  created.push(sb)
  await sb.fs.uploadFile(Buffer.from('previewed'), '/tmp/www/index.html')
  await sb.process.createSession('web')
  await sb.process.executeSessionCommand('web', { command: 'python3 -m http.server 8080 --bind 127.0.0.1 -d /tmp/www', runAsync: true })
  await waitFor(async () => (await sb.process.executeCommand('curl -sf http://127.0.0.1:8080/')).exitCode === 0, 20000, 'the HTTP server')
  const link = await sb.getPreviewLink(8080)
  assert.ok(link.token)
  let res = await fetch(link.url, { headers: { 'x-daytona-preview-token': link.token } })
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'previewed')
  res = await fetch(link.url)
  assert.equal(res.status, 401)
  res = await fetch(link.url, { headers: { 'x-daytona-preview-token': link.token.replace(/.$/, (c) => (c === '0' ? '1' : '0')) } })
  assert.equal(res.status, 401, 'a forged token is refused')
  const signed = await sb.getSignedPreviewUrl(8080, 60)
  res = await fetch(signed.url, { redirect: 'follow' })
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'previewed')
  // The token authenticates the request to agentbox and is removed before
  // it reaches the sandbox: a server there that echoes its request headers
  // never sees it.
  const echo = 'import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n  def do_GET(self):\n    b = str(self.headers).lower().encode()\n    self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)\nhttp.server.HTTPServer(("127.0.0.1", 8081), H).serve_forever()\n'
  await sb.fs.uploadFile(Buffer.from(echo), '/tmp/echo.py')
  await sb.process.executeSessionCommand('web', { command: 'python3 /tmp/echo.py', runAsync: true })
  await waitFor(async () => (await sb.process.executeCommand('curl -sf http://127.0.0.1:8081/')).exitCode === 0, 20000, 'the echo server')
  const echoLink = await sb.getPreviewLink(8081)
  res = await fetch(echoLink.url, { headers: { 'x-daytona-preview-token': echoLink.token } })
  assert.equal(res.status, 200)
  const seen = await res.text()
  assert.ok(seen.includes('host:'), `the echo server's answer: ${seen}`)
  assert.ok(!seen.includes('x-daytona-preview-token') && !seen.includes(echoLink.token.toLowerCase()), `the sandbox saw the preview token: ${seen}`)
})
