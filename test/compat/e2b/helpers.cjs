// Shared helpers of the E2B SDK suite. The SDKs read only the E2B_*
// environment variables the Go driver sets (as `agentbox e2b env` prints).
const assert = require('node:assert/strict')

// waitFor polls cond every 50 ms until it returns true, at most ms.
async function waitFor(cond, ms, what) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await cond()) return
    await new Promise((r) => setTimeout(r, 50))
  }
  assert.fail(`timed out after ${ms} ms waiting for ${what}`)
}

// template is the E2B name of the base template the suite creates from.
const BASE = 'base'

// lacks returns a skip reason when the sandboxes of this run lack a
// feature: AGENTBOX_LACKS lists what the driver read from /v1/info's
// capabilities for their isolation level (gVisor: no_ports,
// no_root_on_request, ...); false otherwise, so a test runs.
function lacks(feature) {
  const list = (process.env.AGENTBOX_LACKS || '').split(',').filter(Boolean)
  return list.includes(feature) && `the sandboxes' isolation level lacks it (capabilities: ${feature})`
}

// checkKernel fails unless sbx runs on the kernel AGENTBOX_KERNEL names
// (gvisor: its release says so), when set: the driver asked for a level,
// the suite proves the sandboxes got it.
async function checkKernel(sbx) {
  const want = process.env.AGENTBOX_KERNEL
  if (!want) return
  const r = await sbx.commands.run('cat /proc/sys/kernel/osrelease')
  assert.ok(r.stdout.includes(want), `kernel release ${r.stdout.trim()}, want ${want}'s`)
}

module.exports = { waitFor, BASE, lacks, checkKernel }
