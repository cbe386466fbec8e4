// The console on a server without API keys (loopback only): signing in
// with an empty key, the operator's pages, a terminal. Environment as
// console.e2e.mjs (CONSOLE_URL, CHROMIUM, OUT_DIR); prints one JSON object.
import { chromium } from 'playwright-core';
import { join } from 'node:path';

const url = process.env.CONSOLE_URL;
const T = 30_000;
const result = { problems: [], screenshots: [] };
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  timeout: T,
});
try {
  const page = await (await browser.newContext({ viewport: { width: 1024, height: 768 } })).newPage();
  page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) result.problems.push(m.text()); });
  page.on('pageerror', (e) => result.problems.push(e.message));
  await page.goto(url + '/', { timeout: T });
  await page.getByLabel('API key').press('Enter');
  await page.getByRole('heading', { name: 'Sandboxes', level: 1 }).waitFor({ timeout: T });
  result.who = await page.locator('.who').innerText();
  await page.getByRole('button', { name: '+ New sandbox' }).click();
  await page.getByRole('button', { name: 'Create sandbox' }).click();
  const row = page.locator('tbody tr[data-id]').first();
  await row.waitFor({ timeout: T });
  const id = await row.getAttribute('data-id');
  await page.getByRole('link', { name: id, exact: true }).click();
  await page.locator('#terminal[data-connected="true"]').waitFor({ timeout: T });
  await page.locator('#terminal').click();
  await page.keyboard.type('echo keyless-$((6*7))\n');
  await page.waitForFunction(() => [...document.querySelectorAll('#terminal .xterm-rows > div')].some((r) => r.textContent.trim() === 'keyless-42'), null, { timeout: T });
  result.terminal = 'keyless-42';
  await page.getByRole('link', { name: 'Admin' }).click();
  await page.locator('#all-sandboxes tbody th', { hasText: id }).waitFor({ timeout: T });
  const path = join(process.env.OUT_DIR, 'keyless-admin.png');
  await page.screenshot({ path });
  result.screenshots.push(path);
  // Killed from its own page, which then goes back to the list.
  await page.goto(`${url}/#/sandboxes/${id}/logs`);
  await page.getByRole('button', { name: `Kill ${id}` }).click();
  await page.getByRole('alertdialog').getByRole('button', { name: 'Kill' }).click();
  await page.waitForURL(/#\/sandboxes$/, { timeout: T });
  await page.locator('#sandbox-count', { hasText: '0 sandboxes' }).waitFor({ timeout: T });
  result.killed = id;
} catch (e) {
  result.error = String(e?.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exit(result.error ? 1 : 0);
