// Network settings through the unmodified @daytonaio/sdk, enforced: run by
// TestDaytonaSDKNetwork against a daemon with egress networking and the
// test's own "internet" (198.18.77.1 = api.test serves HTTP, as does
// 198.18.77.3 = evil.test). Sandboxes use the host template (curl).
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { Daytona } = require('@daytonaio/sdk')

const daytona = new Daytona()
const created = []
after(async () => {
  for (const sb of created) await sb.delete().catch(() => {})
  setTimeout(() => process.exit(process.exitCode ?? 0), 100).unref()
})

async function make(params) {
  const sb = await daytona.create({ snapshot: 'host', ...params })
  created.push(sb)
  return sb
}

// reach tells whether url answers from inside sb (bounded to a few seconds).
async function reach(sb, url) {
  const r = await sb.process.executeCommand(`curl -sS -m 4 ${url} 2>&1; echo " rc=$?"`)
  return /hello from the test internet/.test(r.result)
}

test('networkAllowList (CIDRs) at create; networkBlockAll on and off at run time', async () => {
  const sb = await make({ networkAllowList: '198.18.77.1/32' })
  assert.equal(sb.networkAllowList, '198.18.77.1/32')
  assert.equal(sb.networkBlockAll, false)
  assert.equal(await reach(sb, 'http://198.18.77.1/'), true, 'the allowed host')
  assert.equal(await reach(sb, 'http://198.18.77.3/'), false, 'a host not in the list')

  await sb.updateNetworkSettings({ networkBlockAll: true })
  assert.equal(sb.networkBlockAll, true)
  assert.equal(await reach(sb, 'http://198.18.77.1/'), false, 'blocked')

  await sb.updateNetworkSettings({ networkBlockAll: false })
  assert.equal(sb.networkBlockAll, false)
  assert.equal(sb.networkAllowList, undefined)
  assert.equal(await reach(sb, 'http://198.18.77.3/'), true, 'open again')

  await sb.updateNetworkSettings({ networkAllowList: '198.18.77.3' })
  assert.equal((await daytona.get(sb.id)).networkAllowList, '198.18.77.3/32')
  assert.equal(await reach(sb, 'http://198.18.77.3/'), true)
  assert.equal(await reach(sb, 'http://198.18.77.1/'), false)
})

test('domainAllowList and networkBlockAll at create; bad lists refused', async () => {
  const sb = await make({ domainAllowList: 'api.test' })
  assert.equal(sb.domainAllowList, 'api.test')
  assert.equal(await reach(sb, 'http://api.test/'), true, 'the allowed name')
  assert.equal(await reach(sb, 'http://evil.test/'), false, 'another name')
  assert.equal(await reach(sb, 'http://198.18.77.3/'), false, 'an address not allowed')

  const blocked = await make({ networkBlockAll: true })
  assert.equal(blocked.networkBlockAll, true)
  assert.equal(await reach(blocked, 'http://198.18.77.1/'), false)
  assert.equal(await reach(blocked, 'http://api.test/'), false)

  await assert.rejects(make({ networkAllowList: 'not-a-cidr' }), (e) => e.statusCode === 400 && /networkAllowList/.test(e.message))
  await assert.rejects(sb.updateNetworkSettings({ domainAllowList: '10.0.0.0/8' }), (e) => e.statusCode === 400 && /networkAllowList/.test(e.message))
})
