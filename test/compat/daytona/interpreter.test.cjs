// The code interpreter through the unmodified @daytonaio/sdk: state kept
// between runs of the default context, streamed stdout and stderr,
// errors with their name, envs, isolated contexts (create, list,
// delete), a timeout that ends in the SDK's timeout error and leaves the
// sandbox usable.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { Daytona, DaytonaTimeoutError } = require('@daytonaio/sdk')

const daytona = new Daytona()
const created = []
after(async () => {
  for (const sb of created) await sb.delete().catch(() => {})
  setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref()
})

test('codeInterpreter: state, streaming, errors, envs, contexts, timeout', async () => {
  const sb = await daytona.create()
  created.push(sb)
  const ci = sb.codeInterpreter

  let r = await ci.runCode('x = 41\nprint("set")')
  assert.equal(r.stdout, 'set\n')
  assert.equal(r.error, undefined)
  const chunks = []
  r = await ci.runCode('import sys, time\nprint(x + 1)\nsys.stdout.flush()\ntime.sleep(0.2)\nsys.stderr.write("warn\\n")', {
    onStdout: (m) => chunks.push(['out', m.output]),
    onStderr: (m) => chunks.push(['err', m.output]),
  })
  assert.equal(r.stdout, '42\n')
  assert.equal(r.stderr, 'warn\n')
  assert.deepEqual(chunks, [['out', '42\n'], ['err', 'warn\n']])

  r = await ci.runCode('1/0')
  assert.equal(r.error.name, 'ZeroDivisionError')
  assert.match(r.error.traceback, /ZeroDivisionError/)

  r = await ci.runCode('import os\nprint(os.environ["GREETING"])', { envs: { GREETING: 'hello' } })
  assert.equal(r.stdout, 'hello\n')

  // A context of its own: no x there, its own cwd.
  const ctx = await ci.createContext('/tmp')
  assert.ok(ctx.id)
  assert.equal(ctx.cwd, '/tmp')
  assert.equal(ctx.language, 'python')
  assert.ok(!Number.isNaN(Date.parse(ctx.createdAt)))
  r = await ci.runCode('import os\nprint(os.getcwd())\nprint("x" in globals())', { context: ctx })
  assert.equal(r.stdout, '/tmp\nFalse\n')
  assert.deepEqual((await ci.listContexts()).map((c) => c.id), [ctx.id])
  await ci.deleteContext(ctx)
  assert.deepEqual(await ci.listContexts(), [])
  await assert.rejects(ci.runCode('print(1)', { context: ctx }))

  await assert.rejects(ci.runCode('import time\ntime.sleep(30)', { timeout: 1 }), (e) => e instanceof DaytonaTimeoutError)
  // The interrupt kept the default context and its state.
  r = await ci.runCode('print(x)')
  assert.equal(r.stdout, '41\n')
})

test('codeInterpreter: another tenant cannot reach the sandbox', async () => {
  const sb = await daytona.create()
  created.push(sb)
  const other = new Daytona({ apiKey: process.env.DAYTONA_OTHER_API_KEY })
  await assert.rejects(async () => {
    const foreign = await other.get(sb.id)
    await foreign.codeInterpreter.runCode('print(1)')
  })
})
