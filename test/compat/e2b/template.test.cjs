const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { Template, Sandbox } = require('e2b')

test('Template.build of a small template, then a sandbox from it', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-tpl-'))
  const name = `e2b-suite-${Date.now()}`
  try {
    fs.mkdirSync(path.join(dir, 'app'))
    fs.writeFileSync(path.join(dir, 'app', 'hello.txt'), 'copied from the context\n')
    // fromImage names an image the daemon can pull or a stored template.
    const tpl = Template({ fileContextPath: dir })
      .fromImage('base')
      .runCmd('echo "built\nin two lines" > /opt/marker.txt && mkdir -p /opt/app', { user: 'root' })
      .copy('app/hello.txt', '/opt/app/hello.txt')
      .setEnvs({ GREETING: 'from the template' })
      .setWorkdir('/opt/app')
    const logs = []
    const res = await Template.build(tpl, name, { onBuildLogs: (e) => logs.push(String(e.message)) })
    assert.equal(res.templateId, name)
    assert.ok(logs.some((l) => /steps run/.test(l)), logs.join('\n'))
    assert.equal(await Template.exists(name), true)
    assert.equal(await Template.exists('code-interpreter-v1'), true, "E2B's name of agentbox's code-interpreter")
    assert.equal(await Template.exists(`${name}-never-built`), false)
    // GET /templates lists it under its E2B names.
    const listed = await (await fetch(`${process.env.E2B_API_URL}/templates`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })).json()
    assert.ok(listed.some((t) => t.templateID === name && t.buildStatus === 'ready'), JSON.stringify(listed.map((t) => t.templateID)))
    assert.ok(listed.some((t) => t.templateID === 'code-interpreter-v1' && t.aliases.includes('code-interpreter')))

    const sbx = await Sandbox.create(name)
    try {
      const r = await sbx.commands.run('cat /opt/marker.txt /opt/app/hello.txt; echo "$GREETING"; pwd')
      assert.equal(r.stdout, 'built\nin two lines\ncopied from the context\nfrom the template\n/opt/app\n')
    } finally {
      await sbx.kill()
    }
    // A failing step fails the build with its message.
    const bad = Template({ fileContextPath: dir }).fromTemplate('base').runCmd('echo nope >&2; exit 7')
    await assert.rejects(Template.build(bad, `${name}-bad`), /exit|7|failed/i)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
    // The suite's daemon shares its template store with later runs (the
    // test cache): leave nothing behind (agentbox's native API).
    const del = await fetch(`${process.env.E2B_API_URL}/v1/templates/${name}`, { method: 'DELETE', headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` } })
    assert.ok(del.ok, `delete template ${name}: ${del.status} ${await del.text()}`)
    // And what earlier runs may have left.
    const list = await (await fetch(`${process.env.E2B_API_URL}/v1/templates`, { headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` } })).json()
    for (const t of list.templates ?? []) {
      if (t.name.startsWith('e2b-suite-')) await fetch(`${process.env.E2B_API_URL}/v1/templates/${t.name}`, { method: 'DELETE', headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` } })
    }
  }
})
