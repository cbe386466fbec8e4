const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { Sandbox } = require('@e2b/code-interpreter')
const { checkKernel } = require('./helpers.cjs')

let sbx
before(async () => { sbx = await Sandbox.create(); await checkKernel(sbx) }) // code-interpreter-v1
after(async () => { await sbx?.kill() })

test('runCode keeps state between cells', async () => {
  await sbx.runCode('x = 41')
  const r = await sbx.runCode('x + 1')
  assert.equal(r.text, '42')
  const out = []
  const p = await sbx.runCode('print("to stdout")', { onStdout: (m) => out.push(m.line) })
  assert.deepEqual(p.logs.stdout, ['to stdout\n'])
  assert.ok(out.join('').includes('to stdout'))
})

test('an error comes back with its traceback', async () => {
  const r = await sbx.runCode('def f():\n    return 1/0\nf()')
  assert.equal(r.error.name, 'ZeroDivisionError')
  assert.match(r.error.traceback, /ZeroDivisionError/)
  assert.match(r.error.traceback, /f\(\)/)
})

test('a matplotlib figure is a PNG result', async () => {
  const r = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
  assert.equal(r.error, undefined)
  const png = r.results.find((x) => x.png)
  assert.ok(png, JSON.stringify(r.results.map((x) => x.formats())))
  assert.equal(Buffer.from(png.png, 'base64').subarray(1, 4).toString(), 'PNG')
})

test('contexts are separate interpreters', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  await sbx.runCode('y = "in ctx"', { context: ctx })
  assert.equal((await sbx.runCode('y', { context: ctx })).text, 'in ctx') // E2B unwraps a string's repr
  assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp')
  const other = await sbx.runCode('y')
  assert.equal(other.error.name, 'NameError')
  const list = await sbx.listCodeContexts()
  assert.ok(list.some((c) => c.id === ctx.id))
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('y', { context: ctx })).error.name, 'NameError')
  await sbx.removeCodeContext(ctx)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
})
