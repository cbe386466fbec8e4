// The E2B data plane as E2B's own documentation drives it: one working
// directory for commands and files, root in any sandbox, file metadata,
// command-scoped environment variables, empty files, removals, several
// files at once, directory watches, and the error a killed sandbox gives.
const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { Sandbox, FilesystemEventType, FileNotFoundError, TimeoutError, CommandExitError } = require('e2b')
const { waitFor, BASE, lacks, checkKernel } = require('./helpers.cjs')

let sbx
before(async () => { sbx = await Sandbox.create(BASE); await checkKernel(sbx) })
after(async () => { await sbx?.kill() })

test('commands and files share one working directory, the home', async () => {
  const pwd = (await sbx.commands.run('pwd')).stdout.trim()
  assert.equal(pwd, '/home/user')
  const info = await sbx.files.write('test_file.txt', 'hello')
  assert.equal(info.path, `${pwd}/test_file.txt`)
  assert.equal((await sbx.files.getInfo('test_file.txt')).path, `${pwd}/test_file.txt`)
  assert.equal((await sbx.commands.run('cat test_file.txt')).stdout, 'hello')
  // What a command makes with a relative name, the files API finds.
  await sbx.commands.run('mkdir made_by_cmd && ln -s test_file.txt link_by_cmd')
  assert.equal((await sbx.files.getInfo('made_by_cmd')).type, 'dir')
  const link = await sbx.files.getInfo('link_by_cmd')
  assert.equal(link.path, `${pwd}/link_by_cmd`)
  assert.equal(link.symlinkTarget, 'test_file.txt')
  // A watch on a relative directory sees what a command does in it.
  const events = []
  const h = await sbx.files.watchDir('made_by_cmd', (e) => events.push(e))
  try {
    await sbx.commands.run('echo x > made_by_cmd/new.txt')
    await waitFor(() => events.some((e) => e.name === 'new.txt'), 10_000, 'an event of the relative watch')
  } finally {
    await h.stop()
  }
  // An explicit cwd is still honoured, and /workspace (agentbox's own
  // working directory, which the native and agentscope APIs use) is there.
  assert.equal((await sbx.commands.run('pwd', { cwd: '/workspace' })).stdout, '/workspace\n')
})

// Root in any sandbox, as E2B's clients use it: root of the sandbox's own
// user namespace, with a small capability set; everything that names no
// user stays uid 1000 without capabilities.
test('root: commands and files as root in an ordinary sandbox', { skip: lacks('no_root_on_request') }, async () => {
  // root's commands start in its home, where its relative paths resolve.
  assert.equal((await sbx.commands.run('pwd', { user: 'root' })).stdout.trim(), '/root')
  const id = await sbx.commands.run('id -u; id -un', { user: 'root' })
  assert.equal(id.stdout, '0\nroot\n')
  // Default commands still run as the sandbox user, unprivileged.
  assert.equal((await sbx.commands.run('id -u')).stdout, '1000\n')
  const caps = await sbx.commands.run('grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status')
  assert.match(caps.stdout, /CapEff:\s+0000000000000000/)
  assert.match(caps.stdout, /CapBnd:\s+0000000000000000/)
  assert.match(caps.stdout, /NoNewPrivs:\s+1/)
  // A root-owned file, written and read as root, unreadable to the user.
  const info = await sbx.files.write('/home/user/secret.txt', 'root only', { user: 'root' })
  assert.equal(info.path, '/home/user/secret.txt')
  await sbx.commands.run('chmod 600 /home/user/secret.txt', { user: 'root' })
  assert.equal((await sbx.files.getInfo('/home/user/secret.txt')).owner, 'root')
  assert.equal(await sbx.files.read('/home/user/secret.txt', { user: 'root' }), 'root only')
  await assert.rejects(sbx.files.read('/home/user/secret.txt'), (e) => /permission denied|403/i.test(String(e)))
  // Relative paths of root's file calls are root's home, as in E2B.
  const rel = await sbx.files.write('in_root_home.txt', 'x', { user: 'root' })
  assert.equal(rel.path, '/root/in_root_home.txt')
  // root in the sandbox is not root of the host: no mount, no modules.
  await assert.rejects(sbx.commands.run('mount -t tmpfs none /mnt', { user: 'root' }), (e) => e instanceof CommandExitError)
  const rootCaps = await sbx.commands.run('grep CapEff /proc/self/status', { user: 'root' })
  const eff = BigInt('0x' + rootCaps.stdout.trim().split(/\s+/)[1])
  assert.equal(eff & (1n << 21n), 0n, 'no CAP_SYS_ADMIN')
  assert.equal(eff & (1n << 13n), 0n, 'no CAP_NET_RAW')
  assert.equal(eff & (1n << 27n), 0n, 'no CAP_MKNOD')
  // The user's processes cannot signal the agent any more.
  const kill = await sbx.commands.run('kill -0 1 2>&1; echo $?')
  assert.match(kill.stdout, /Operation not permitted[\s\S]*1\n$/)
})

// What E2B's clients use root for: installing packages (no network here,
// so a package built in the sandbox, with a maintainer script), system
// files in the template's writable root, accounts. The sandbox user
// cannot do any of it.
test('root: installs a package, writes system files, adds a user', { skip: lacks('no_root_on_request') }, async () => {
  const build = [
    'set -e; d=$(mktemp -d); mkdir -p $d/DEBIAN $d/usr/local/bin',
    'printf "Package: agentbox-root-test\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: t <t@example.com>\\nDescription: t\\n" > $d/DEBIAN/control',
    'printf "#!/bin/sh\\necho installed > /etc/agentbox-root-test.marker\\n" > $d/DEBIAN/postinst; chmod 755 $d/DEBIAN/postinst',
    'printf "#!/bin/sh\\necho hello from a package\\n" > $d/usr/local/bin/agentbox-hello; chmod 755 $d/usr/local/bin/agentbox-hello',
    'dpkg-deb --root-owner-group --build $d /tmp/agentbox-root-test.deb >/dev/null',
  ].join('\n')
  await sbx.commands.run(build)
  await assert.rejects(sbx.commands.run('dpkg -i /tmp/agentbox-root-test.deb'), (e) => e instanceof CommandExitError && /superuser|ermission/.test(e.stderr + e.stdout))
  const inst = await sbx.commands.run('apt-get install -y /tmp/agentbox-root-test.deb', { user: 'root', envs: { DEBIAN_FRONTEND: 'noninteractive' } })
  assert.equal(inst.exitCode, 0)
  assert.equal((await sbx.commands.run('agentbox-hello')).stdout, 'hello from a package\n')
  assert.equal((await sbx.commands.run('cat /etc/agentbox-root-test.marker')).stdout, 'installed\n')
  assert.match((await sbx.commands.run('dpkg -s agentbox-root-test')).stdout, /Status: install ok installed/)
  const bin = await sbx.files.getInfo('/usr/local/bin/agentbox-hello')
  assert.equal(bin.owner, 'root')
  assert.equal(bin.group, 'root')

  // A system file: written as root, owned by root; the user may not.
  const conf = await sbx.files.write('/etc/agentbox-root.conf', 'answer=42\n', { user: 'root' })
  assert.equal(conf.path, '/etc/agentbox-root.conf')
  assert.equal((await sbx.files.getInfo('/etc/agentbox-root.conf')).owner, 'root')
  assert.equal((await sbx.commands.run('cat /etc/agentbox-root.conf')).stdout, 'answer=42\n')
  await assert.rejects(sbx.files.write('/etc/agentbox-user.conf', 'x'), (e) => /permission denied|403/i.test(String(e)))
  await assert.rejects(sbx.commands.run('echo x >> /etc/agentbox-root.conf'), (e) => e instanceof CommandExitError)

  // An account root adds is a user commands can name.
  await sbx.commands.run('useradd --create-home --uid 1001 --shell /bin/bash alice', { user: 'root' })
  assert.equal((await sbx.commands.run('id -u; id -un; pwd', { user: 'alice' })).stdout, '1001\nalice\n/home/alice\n')
  const a = await sbx.files.write('/home/alice/note.txt', 'hi', { user: 'alice' })
  assert.equal((await sbx.files.getInfo(a.path)).owner, 'alice')
  // root drops to another user the usual way, too.
  assert.equal((await sbx.commands.run('setpriv --reuid user --regid user --init-groups id -un', { user: 'root' })).stdout, 'user\n')
})

test('file metadata: written, listed, renamed, stat-ed, set from inside', async () => {
  const dir = '/home/user/meta'
  const md = { author: 'alice', purpose: 'upload' }
  const w = await sbx.files.write(`${dir}/a.txt`, 'alpha', { metadata: md })
  assert.deepEqual(w.metadata, md)
  const w2 = await sbx.files.write(`${dir}/b.bin`, new Uint8Array([1, 2, 3]), { metadata: { kind: 'bytes' }, useOctetStream: true })
  assert.deepEqual(w2.metadata, { kind: 'bytes' })
  const many = await sbx.files.writeFiles([{ path: `${dir}/m1`, data: 'one' }, { path: `${dir}/m2`, data: 'two' }], { metadata: { batch: '1' } })
  assert.deepEqual(many.map((f) => f.metadata), [{ batch: '1' }, { batch: '1' }])
  assert.deepEqual((await sbx.files.getInfo(`${dir}/a.txt`)).metadata, md)
  const listed = Object.fromEntries((await sbx.files.list(dir)).map((e) => [e.name, e.metadata]))
  assert.deepEqual(listed['a.txt'], md)
  assert.deepEqual(listed['m2'], { batch: '1' })
  const moved = await sbx.files.rename(`${dir}/a.txt`, `${dir}/c.txt`)
  assert.deepEqual(moved.metadata, md)
  // Set from inside the sandbox as a user.* extended attribute.
  await sbx.commands.run(`python3 -c "import os; os.setxattr('${dir}/m1', 'user.origin', b'inside')"`)
  assert.deepEqual((await sbx.files.getInfo(`${dir}/m1`)).metadata, { batch: '1', origin: 'inside' })
  // A file written without metadata has none.
  assert.equal((await sbx.files.write(`${dir}/plain`, 'p')).metadata, undefined)
})

test('command-scoped environment variables in a login shell', async () => {
  const r = await sbx.commands.run('echo "$GREETING $OTHER"; which python3', { envs: { GREETING: 'hello', OTHER: 'world' } })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout.split('\n')[0], 'hello world')
  // The sandbox's own PATH (the template's) is the login shell's too.
  const p = await sbx.commands.run('echo $PATH', { envs: { X: '1' } })
  assert.match(p.stdout, /\/home\/user\/\.local\/bin/)
})

// Debian's /etc/profile sets PATH in every login shell; the base template
// keeps the one the shell starts with, as E2B's (Ubuntu's) does.
test('a PATH given with the command wins over the login profile', async () => {
  await sbx.commands.run('mkdir -p /tmp/bin && printf "#!/bin/sh\\necho from-tool\\n" > /tmp/bin/mytool && chmod +x /tmp/bin/mytool')
  const t = await sbx.commands.run('mytool', { envs: { PATH: '/tmp/bin:/usr/local/bin:/usr/bin:/bin' } })
  assert.equal(t.stdout, 'from-tool\n')
})

test('empty files in every format, removals, several files at once', async () => {
  await sbx.files.write('/home/user/empty.txt', '')
  assert.equal(await sbx.files.read('/home/user/empty.txt'), '')
  assert.equal((await sbx.files.read('/home/user/empty.txt', { format: 'bytes' })).length, 0)
  assert.equal((await sbx.files.read('/home/user/empty.txt', { format: 'blob' })).size, 0)
  const stream = await sbx.files.read('/home/user/empty.txt', { format: 'stream' })
  let n = 0
  for await (const chunk of stream) n += chunk.length
  assert.equal(n, 0)
  await sbx.commands.run('touch /home/user/touched')
  assert.equal(await sbx.files.read('/home/user/touched'), '')
  // E2B removes a missing path without complaint.
  await sbx.files.remove('/home/user/never-existed')
  await assert.rejects(sbx.files.read('/home/user/never-existed'), (e) => e instanceof FileNotFoundError)
  const files = Array.from({ length: 5 }, (_, i) => ({ path: `/home/user/batch/f${i}.txt`, data: `file ${i}` }))
  const infos = await sbx.files.writeFiles(files)
  assert.deepEqual(infos.map((f) => f.path), files.map((f) => f.path))
  for (const f of files) assert.equal(await sbx.files.read(f.path), f.data)
  const octet = await sbx.files.write(files.map((f) => ({ ...f, data: new Blob([f.data]) })), { useOctetStream: true })
  assert.equal(octet.length, files.length)
})

test('watchDir: plain, recursive, a folder added later, entries', async () => {
  const dir = '/home/user/watch'
  await sbx.files.makeDir(`${dir}/sub`)
  const plain = []
  const rec = []
  const h1 = await sbx.files.watchDir(dir, (e) => plain.push(e))
  const h2 = await sbx.files.watchDir(dir, (e) => rec.push(e), { recursive: true, includeEntry: true })
  try {
    await sbx.files.write(`${dir}/top.txt`, 'x')
    await waitFor(() => plain.some((e) => e.name === 'top.txt'), 10_000, 'the plain watch')
    await sbx.files.write(`${dir}/sub/deep.txt`, 'y')
    await waitFor(() => rec.some((e) => e.name === 'sub/deep.txt'), 10_000, 'the recursive watch')
    // A folder made after the watch started is watched too.
    await sbx.files.makeDir(`${dir}/later`)
    await waitFor(() => rec.some((e) => e.name === 'later' && e.type === FilesystemEventType.CREATE), 10_000, 'the new folder')
    await sbx.files.write(`${dir}/later/x.txt`, 'z')
    await waitFor(() => rec.some((e) => e.name === 'later/x.txt'), 10_000, 'a file in the new folder')
    const ev = rec.find((e) => e.name === 'later/x.txt' && e.entry)
    assert.ok(ev, JSON.stringify(rec))
    assert.equal(ev.entry.path, `${dir}/later/x.txt`)
    assert.equal(ev.entry.type, 'file')
    // The plain watch does not see below its directory.
    assert.ok(!plain.some((e) => e.name.includes('/')), JSON.stringify(plain))
    await sbx.files.remove(`${dir}/top.txt`)
    await waitFor(() => rec.some((e) => e.name === 'top.txt' && e.type === FilesystemEventType.REMOVE), 10_000, 'a remove event')
  } finally {
    await h1.stop()
    await h2.stop()
  }
})

test('a sandbox killed during a command: TimeoutError, as E2B documents', async () => {
  const victim = await Sandbox.create(BASE)
  const running = victim.commands.run('sleep 600')
  running.catch(() => {}) // asserted below
  await waitFor(async () => (await victim.commands.list()).some((p) => p.cmd === '/bin/bash'), 10_000, 'the command to start')
  await victim.kill()
  await assert.rejects(running, (e) => {
    assert.ok(e instanceof TimeoutError, `${e?.name}: ${e?.message}`)
    return true
  })
  // A killed sandbox is not running (its /health answers 502, as on E2B).
  assert.equal(await victim.isRunning(), false)
  // Calls to the killed sandbox are the same class.
  await assert.rejects(victim.commands.run('true'), (e) => e instanceof TimeoutError || e.name === 'SandboxNotFoundError')
})
