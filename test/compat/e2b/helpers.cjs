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

module.exports = { waitFor, BASE }
