// Drives the web console in Debian's Chromium against a running daemon
// (test/e2e TestConsole starts the daemon and runs this script).
//
// Environment: CONSOLE_URL, KEY_A and KEY_B (two tenants), KEY_OP (the
// operator), CHROMIUM (the browser), OUT_DIR (screenshots). Prints one JSON
// object of results on its last line; exits non-zero on the first failure.
import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { createServer } from 'node:http';

const env = (k) => { const v = process.env[k]; if (v === undefined) throw new Error(`${k} is not set`); return v; };
const url = env('CONSOLE_URL');
const keyA = env('KEY_A'), keyB = env('KEY_B'), keyOp = env('KEY_OP');
const out = env('OUT_DIR');
const T = 30_000; // each wait's bound

const result = { screenshots: [], problems: [] };

// A webhook receiver on loopback (the daemon runs with WEBHOOK_ALLOW_PRIVATE).
const hookBodies = [];
const hookServer = createServer((req, res) => {
  if (req.method === 'GET' && req.url.startsWith('/frame?src=')) {
    // A page of another origin that frames a URL (the desktop page must refuse it).
    const src = decodeURIComponent(req.url.slice('/frame?src='.length)).replace(/"/g, '&quot;');
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end(`<!doctype html><title>elsewhere</title><iframe id="f" src="${src}"></iframe>`);
    return;
  }
  let b = '';
  req.on('data', (c) => { b += c; });
  req.on('end', () => { hookBodies.push(b); res.writeHead(204); res.end(); });
});
await new Promise((r) => hookServer.listen(0, '127.0.0.1', r));
const hookURL = `http://127.0.0.1:${hookServer.address().port}/hook`;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  // Playwright gives the browser a fresh --user-data-dir of its own (a new
  // temporary profile, removed on close); every tenant below also gets a
  // context of its own, with empty storage.
  timeout: T,
});

function watch(page, who) {
  // Refused requests are the API's answers (a wrong key, a tenant's 403),
  // shown on the page; anything else logged as an error (a CSP violation,
  // an exception) is a problem.
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) result.problems.push(`${who} console: ${m.text()}`);
  });
  page.on('pageerror', (e) => result.problems.push(`${who} page error: ${e.message}`));
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

// Each page is checked for accessibility (axe-core, WCAG 2 A and AA rules)
// when its screenshot is taken; serious and critical findings fail.
async function shot(page, name, axeOptions = {}) {
  await layout(page, name);
  const path = join(out, `${name}.png`);
  await page.screenshot({ path, fullPage: false });
  result.screenshots.push(path);
  // Evaluated through the debugging protocol: the page's CSP still holds
  // for everything the page itself runs.
  if (!(await page.evaluate(() => typeof window.axe !== 'undefined'))) await page.evaluate(axeSource);
  const found = await page.evaluate(async (opts) => {
    const r = await window.axe.run(document, { ...opts, runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } });
    return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id}: ${v.help} (${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join('; ')})`);
  }, axeOptions);
  for (const f of found) result.problems.push(`${name} accessibility: ${f}`);
  result.axeChecked = (result.axeChecked ?? 0) + 1;
}

// Layout sanity of the page on screen: nothing wider than the viewport
// (no sideways scrolling), and every chart with its axes and unit.
async function layout(page, name) {
  const l = await page.evaluate(() => ({
    width: window.innerWidth, scroll: document.documentElement.scrollWidth,
    charts: [...document.querySelectorAll('figure.chart')].map((f) => ({
      title: f.dataset.chart, unit: f.querySelector('svg')?.dataset.unit ?? '', unitText: f.querySelector('svg text.unit')?.textContent ?? '',
      yTicks: f.querySelectorAll('g.axis.y text').length, xTicks: f.querySelectorAll('g.axis.x text').length,
      label: f.querySelector('svg')?.getAttribute('aria-label') ?? '' })),
  }));
  if (l.scroll > l.width + 1) result.problems.push(`${name}: ${l.scroll}px wide in a ${l.width}px viewport (sideways scrolling)`);
  for (const c of l.charts) {
    if (!c.unit || c.unitText !== c.unit || c.yTicks < 2) result.problems.push(`${name}: chart ${c.title} lacks its unit or y axis: ${JSON.stringify(c)}`);
  }
  result.layouts = result.layouts ?? {};
  result.layouts[name] = { width: l.width, scroll: l.scroll, charts: l.charts.length, xTicks: Math.min(...l.charts.map((c) => c.xTicks), 99) };
  return l;
}

async function signIn(page, key) {
  await page.goto(url + '/', { timeout: T });
  await page.getByLabel('API key').waitFor({ timeout: T });
  await page.getByLabel('API key').fill(key);
  await page.getByLabel('API key').press('Enter'); // keyboard only
  await page.getByRole('heading', { name: 'Sandboxes', level: 1 }).waitFor({ timeout: T });
}

async function api(key, method, path) {
  return fetch(url + path, { method, headers: { Authorization: `Bearer ${key}` } });
}

try {
  // Tenant A.
  const ctxA = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const a = await ctxA.newPage();
  watch(a, 'A');
  await a.goto(url + '/', { timeout: T });
  await a.getByRole('heading', { name: 'agentbox console' }).waitFor({ timeout: T });
  await shot(a, 'signin');
  // A wrong key is refused with the API's words.
  await a.getByLabel('API key').fill('not-a-key');
  await a.getByRole('button', { name: 'Sign in' }).click();
  const refusal = await a.getByRole('alert').textContent({ timeout: T });
  if (!refusal.includes('unauthenticated: invalid API key')) throw new Error(`wrong key: got ${refusal}`);
  result.refusal = refusal;
  await signIn(a, keyA);

  // The empty state, then create a sandbox with metadata, see it in the list.
  await a.locator('.empty', { hasText: 'No sandboxes yet' }).waitFor({ timeout: T });
  await shot(a, 'sandboxes-empty');
  await a.getByRole('button', { name: '+ New sandbox' }).click();
  await a.getByLabel('Metadata', { exact: true }).fill('suite=console');
  await a.getByRole('button', { name: 'Create sandbox' }).click();
  const row = a.locator('tbody tr[data-id]').first();
  await row.waitFor({ timeout: T });
  const id = await row.getAttribute('data-id');
  result.sandbox = id;
  // The metadata filter: a pair it has shows it, another hides it.
  await a.getByLabel('Metadata filter').fill('suite=other');
  await a.getByRole('button', { name: 'Filter' }).click();
  await a.locator('#sandbox-count', { hasText: '0 sandboxes matching the filter' }).waitFor({ timeout: T });
  await a.getByLabel('Metadata filter').fill('suite=console');
  await a.getByRole('button', { name: 'Filter' }).click();
  await a.locator(`tr[data-id="${id}"]`).waitFor({ timeout: T });
  // Wait for two stats samples so the sparklines have a line.
  await a.waitForFunction((id) => {
    const p = document.querySelector(`tr[data-id="${id}"] svg.spark polyline`);
    return p && p.getAttribute('points').split(' ').length >= 2;
  }, id, { timeout: T });
  await shot(a, 'sandboxes');

  // Pause and resume, where the backend can (capabilities.pause).
  const info = await (await api(keyA, 'GET', '/v1/info')).json();
  result.pauseSupported = info.capabilities?.pause === true;
  const pauseButtons = await a.getByRole('button', { name: `Pause ${id}` }).count();
  if (pauseButtons !== (result.pauseSupported ? 1 : 0)) throw new Error(`pause supported ${result.pauseSupported} but ${pauseButtons} pause buttons`);
  if (result.pauseSupported) {
    await a.getByRole('button', { name: `Pause ${id}` }).click();
    await a.getByRole('alertdialog').getByRole('button', { name: 'Pause' }).click();
    await a.locator(`tr[data-id="${id}"] .state.paused`).waitFor({ timeout: T });
    result.pausedState = (await (await api(keyA, 'GET', `/v1/sandboxes/${id}`)).json()).state;
    await shot(a, 'paused');
    await a.getByRole('button', { name: `Resume ${id}` }).click();
    await a.locator(`tr[data-id="${id}"] .state.running`).waitFor({ timeout: T });
    result.resumedState = (await (await api(keyA, 'GET', `/v1/sandboxes/${id}`)).json()).state;
  }

  // Extend: the end time moves later.
  const endBefore = Date.parse((await (await api(keyA, 'GET', `/v1/sandboxes/${id}`)).json()).end_at);
  await a.getByRole('button', { name: `Extend ${id}` }).click();
  let endAfter = endBefore;
  for (let i = 0; i < 50 && endAfter <= endBefore; i++) {
    await a.waitForTimeout(100);
    endAfter = Date.parse((await (await api(keyA, 'GET', `/v1/sandboxes/${id}`)).json()).end_at);
  }
  result.extendedBySeconds = Math.round((endAfter - endBefore) / 1000);

  // The terminal: type echo hi, read hi on the screen.
  await a.getByRole('link', { name: id, exact: true }).click();
  await a.locator('#terminal[data-connected="true"]').waitFor({ timeout: T });
  await a.locator('#terminal').click();
  await a.keyboard.type('echo hi\n');
  await a.waitForFunction(() => [...document.querySelectorAll('#terminal .xterm-rows > div')].some((r) => r.textContent.trim() === 'hi'), null, { timeout: T });
  result.terminal = await a.locator('#terminal .xterm-rows').innerText();
  await shot(a, 'terminal');

  // Files: upload, see it listed; edit, save, read it back through the API.
  // The tabs follow the keyboard (ARIA tabs: arrow keys).
  await a.getByRole('tab', { name: 'Terminal' }).focus();
  await a.keyboard.press('ArrowRight');
  await a.waitForURL(/\/files$/, { timeout: T });
  await a.locator('[role=tab][aria-selected="true"]', { hasText: 'Files' }).waitFor({ timeout: T });
  result.keyboardTabs = await a.evaluate(() => document.activeElement?.textContent === 'Files' ? 'focused' : `focus on ${document.activeElement?.outerHTML.slice(0, 80)}`);
  await a.getByRole('heading', { name: 'Files' }).waitFor({ timeout: T });
  await a.locator('#files tbody tr').first().waitFor({ timeout: T });
  // It opens at the work directory when the sandbox has one, else home.
  const hasWorkspace = (await api(keyA, 'GET', `/v1/sandboxes/${id}/files/stat?path=/workspace`)).status === 200;
  result.workdirWanted = hasWorkspace ? '/workspace' : '/home/user';
  result.workdir = await a.locator('#dir').inputValue();
  result.crumbs = await a.locator('.crumbs[aria-label="Directory path"]').innerText();
  const wd = result.workdir;
  await a.getByLabel('Upload to this directory').setInputFiles({ name: 'upload.txt', mimeType: 'text/plain', buffer: Buffer.from('uploaded from the browser\n') });
  await a.locator('tr[data-name="upload.txt"]').waitFor({ timeout: T });
  await a.getByRole('textbox', { name: 'New folder' }).fill('made-here');
  await a.getByRole('button', { name: 'Create folder' }).click();
  await a.getByRole('button', { name: 'made-here/' }).click();
  await a.locator('#files tbody', { hasText: 'Empty directory' }).waitFor({ timeout: T });
  result.folder = await a.locator('#dir').inputValue();
  await a.getByRole('button', { name: 'Parent directory' }).click();
  await a.locator('tr[data-name="upload.txt"]').waitFor({ timeout: T });
  let res = await api(keyA, 'GET', `/v1/sandboxes/${id}/files?path=${wd}/upload.txt`);
  result.uploaded = await res.text();
  await a.getByRole('button', { name: 'Edit upload.txt' }).click();
  await a.locator('#edit-area').fill('edited in the console\n');
  await a.getByRole('button', { name: 'Save' }).click();
  await a.locator('#edit-status', { hasText: 'Saved' }).waitFor({ timeout: T });
  res = await api(keyA, 'GET', `/v1/sandboxes/${id}/files?path=${wd}/upload.txt`);
  result.edited = await res.text();
  await shot(a, 'files');
  // Drag and drop: a file dropped on the panel lands in the directory.
  const dt = await a.evaluateHandle(() => { const d = new DataTransfer(); d.items.add(new File(['dropped in\n'], 'dropped.txt', { type: 'text/plain' })); return d; });
  await a.dispatchEvent('#panel', 'dragenter', { dataTransfer: dt });
  await a.dispatchEvent('#panel', 'drop', { dataTransfer: dt });
  await a.locator('tr[data-name="dropped.txt"]').waitFor({ timeout: T });
  result.dropped = await (await api(keyA, 'GET', `/v1/sandboxes/${id}/files?path=${wd}/dropped.txt`)).text();
  // Previews: text, and an image (a 2x2 PNG written through the API).
  await a.getByRole('button', { name: 'Preview dropped.txt' }).click();
  result.previewText = await a.locator('#preview pre').innerText({ timeout: T });
  const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR4nGP4z8DAwMDAxMDAwMDAAAANHQEDasKb6QAAAABJRU5ErkJggg==', 'base64');
  await fetch(`${url}/v1/sandboxes/${id}/files?path=${wd}/dot.png`, { method: 'PUT', headers: { Authorization: `Bearer ${keyA}`, 'Content-Type': 'application/octet-stream' }, body: png });
  await a.getByRole('button', { name: 'Open', exact: true }).click();
  await a.getByRole('button', { name: 'Preview dot.png' }).click();
  await a.locator('#preview img.preview').waitFor({ timeout: T });
  result.previewImage = await a.locator('#preview img.preview').evaluate((i) => (i.complete ? i.naturalWidth : 0));
  await shot(a, 'files-preview');

  // Ports: a server started in the sandbox (through the API, left running
  // until the sandbox dies) is listed, and its preview link opens it.
  fetch(`${url}/v1/sandboxes/${id}/exec`, { method: 'POST', headers: { Authorization: `Bearer ${keyA}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ cmd: ['python3', '-m', 'http.server', '8123', '--bind', '127.0.0.1'], cwd: wd, timeout: 120 }) }).catch(() => {});
  await a.getByRole('tab', { name: 'Ports' }).click();
  for (let i = 0; i < 20 && await a.getByRole('button', { name: 'Preview link for 8123' }).count() === 0; i++) {
    await a.waitForTimeout(500);
    await a.getByRole('button', { name: 'Look again' }).click();
  }
  await a.getByRole('button', { name: 'Preview link for 8123' }).click();
  const link = a.getByRole('link', { name: 'Open port 8123' });
  await link.waitFor({ timeout: T });
  await shot(a, 'ports');
  const href = await link.getAttribute('href');
  result.previewHref = href.replace(/agentbox_token=[^&]+/, 'agentbox_token=…');
  const preview = await ctxA.newPage();
  await preview.goto(href, { timeout: T });
  result.previewPage = await preview.locator('body').innerText({ timeout: T });
  await preview.close();

  // Exec history: a command run through the API, with its exit code and who ran it.
  await fetch(`${url}/v1/sandboxes/${id}/exec`, { method: 'POST', headers: { Authorization: `Bearer ${keyA}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ cmd: ['sh', '-c', 'echo from-history; exit 3'] }) });
  for (const [tab, ready] of [['Logs', 'ol.logs li'], ['Events', '#timeline li[data-type="created"]'], ['Resources', '#chart-memory polyline'], ['Exec history', '#exec-history tbody tr']]) {
    await a.getByRole('tab', { name: tab }).click();
    await a.locator(ready).first().waitFor({ timeout: T });
    await shot(a, tab.toLowerCase().replace(' ', '-'));
  }
  result.execRow = await a.locator('#exec-history tbody tr').first().evaluate((tr) => [...tr.children].map((c) => c.textContent));
  // Snapshot: named in a dialog; a host sandbox has no layer to take, so
  // the API's refusal is shown on the page.
  await a.getByRole('button', { name: 'Snapshot', exact: true }).click();
  await a.getByRole('dialog').getByLabel('Name').fill('console-snap');
  await shot(a, 'snapshot-dialog');
  await a.getByRole('dialog').getByRole('button', { name: 'Take snapshot' }).click();
  result.snapshotRefusal = await a.locator('.sb-head ~ div [role=alert], [role=alert]').first().innerText({ timeout: T });
  // Fork: a new sandbox from a copy of this one's disk, opened at once; its
  // Files tab has the file uploaded above.
  await a.getByRole('button', { name: 'Fork', exact: true }).click();
  await a.getByRole('alertdialog').getByRole('button', { name: 'Fork' }).click();
  await a.waitForURL((u) => /#\/sandboxes\/[^/]+/.test(u.hash) && !u.hash.includes(id), { timeout: T });
  const forkId = decodeURIComponent(new URL(a.url()).hash.split('/')[2]);
  result.fork = forkId;
  await a.getByRole('tab', { name: 'Files' }).click();
  await a.locator('tr[data-name="upload.txt"]').waitFor({ timeout: T });
  result.forkHasUpload = true;
  await shot(a, 'fork');
  result.forkKilled = (await api(keyA, 'DELETE', `/v1/sandboxes/${forkId}`)).status;
  await a.goto(`${url}/#/sandboxes/${id}/events`);
  await a.getByRole('tab', { name: 'Events' }).click();
  await a.locator('#timeline li[data-type="created"]').waitFor({ timeout: T });
  result.timeline = await a.locator('#timeline').innerText();
  // A host sandbox has no desktop: the tab says so.
  await a.getByRole('tab', { name: 'Desktop' }).click();
  await a.getByRole('button', { name: 'Watch', exact: true }).click();
  result.desktop = await a.locator('#panel .empty').innerText({ timeout: T });
  await shot(a, 'desktop-none');
  // With a VNC server on the desktop's ports (rfb_stub.py, a stand-in for
  // the desktop template's x11vnc) the tab embeds noVNC through a signed
  // link: the daemon's page, WebSocket and view filter, a real RFB session.
  fetch(`${url}/v1/sandboxes/${id}/exec`, { method: 'POST', headers: { Authorization: `Bearer ${keyA}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ cmd: ['python3', '-c', readFileSync(new URL('./rfb_stub.py', import.meta.url), 'utf8')], timeout: 240 }) }).catch(() => {});
  for (let i = 0; i < 40 && (await api(keyA, 'POST', `/v1/sandboxes/${id}/desktop/links`)).status !== 201; i++) await a.waitForTimeout(250);
  await a.getByRole('button', { name: 'Watch', exact: true }).click();
  const desk = a.frameLocator('#desktop-frame');
  await desk.locator('#status[data-state="connected"]').waitFor({ timeout: T });
  result.desktopStatus = await desk.locator('#status').innerText();
  result.desktopFrame = await a.locator('#desktop-frame').evaluate((f) => ({ title: f.title, mode: f.dataset.mode, src: f.getAttribute('src') }));
  // noVNC draws the stub's picture once its first update has come (after
  // the connect event), top to bottom: wait for its last rows (the first
  // band's colour at the bottom left) and the light box in the middle.
  const drawn = () => desk.locator('canvas').first().evaluate((c) => {
    if (!c.width || !c.height) return { colours: 0, done: false };
    const ctx = c.getContext('2d');
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    for (let i = 0; i < d.length; i += 4 * 97) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    const px = (x, y) => [...ctx.getImageData(x, y, 1, 1).data.slice(0, 3)];
    const [r, g, b] = px(2, c.height - 2), [cr] = px(c.width >> 1, c.height >> 1);
    return { colours: seen.size, done: r === 0x2b && g === 0x6c && b === 0xb0 && cr === 0xee };
  });
  for (let i = 0; i < 60; i++) {
    result.desktopDrawn = await drawn();
    if (result.desktopDrawn.done) break;
    await a.waitForTimeout(500);
  }
  result.desktopNewTab = await a.locator('#desktop-view').getAttribute('href');
  // Another origin (the loopback receiver's port) cannot frame the desktop page.
  const deskLink = await (await fetch(`${url}/v1/sandboxes/${id}/desktop/links`, { method: 'POST', headers: { Authorization: `Bearer ${keyA}` } })).json();
  const other = await ctxA.newPage();
  await other.goto(`http://127.0.0.1:${hookServer.address().port}/frame?src=${encodeURIComponent(url + deskLink.path)}`, { timeout: T });
  const framed = () => other.frames().find((f) => f !== other.mainFrame());
  for (let i = 0; i < 40 && (!framed() || framed().url() === 'about:blank' || framed().url() === ''); i++) await other.waitForTimeout(250);
  await framed()?.waitForLoadState('load', { timeout: T }).catch(() => {});
  result.foreignFrame = { url: framed()?.url() ?? '', desktop: await framed()?.locator('#status').count().catch(() => 0) ?? 0 };
  await other.close();
  // The frame is noVNC's page (the daemon's desktop page), not the console: axe checks the console.
  await shot(a, 'desktop', { iframes: false });
  await a.getByRole('tab', { name: 'Resources' }).click();
  await a.locator('#chart-memory polyline').waitFor({ timeout: T });
  result.resourceCharts = await layout(a, 'resources-check').then((l) => l.charts);
  // Hovering a chart shows the values under the pointer.
  const box = await a.locator('#chart-memory svg').boundingBox();
  await a.mouse.move(box.x + box.width * 0.9, box.y + box.height / 2);
  result.hover = await a.locator('#chart-memory .tip').innerText({ timeout: T });
  await shot(a, 'resources-hover');

  // The compact header: at 1400x900 the tabs and the top of the panel
  // are in the first viewport.
  await a.setViewportSize({ width: 1400, height: 900 });
  await a.getByRole('tab', { name: 'Terminal' }).click();
  await a.locator('#terminal').waitFor({ timeout: T });
  await a.evaluate(() => window.scrollTo(0, 0));
  result.firstView = await a.evaluate(() => ({ tabs: document.querySelector('[role=tablist]').getBoundingClientRect().bottom, panel: document.querySelector('#panel').getBoundingClientRect().top, height: window.innerHeight }));
  await shot(a, 'sandbox-1400x900');
  await a.setViewportSize({ width: 1280, height: 860 });

  // Overview, events and webhooks pages, as the tenant.
  await a.getByRole('link', { name: 'Overview' }).click();
  await a.locator('#chart-sandboxes polyline').first().waitFor({ timeout: T });
  result.overviewStats = await a.locator('#overview-stats').innerText();
  await shot(a, 'overview');
  await a.getByRole('button', { name: '24h' }).click();
  await a.locator('#chart-sandboxes[data-chart]').waitFor({ timeout: T });
  await a.waitForTimeout(300);
  await shot(a, 'overview-24h');
  await a.getByRole('link', { name: 'Events' }).click();
  await a.locator(`#events tr[data-event] a[href*="${id}"]`).first().waitFor({ timeout: T });
  result.eventsPage = await a.locator('#events tbody').innerText();
  await shot(a, 'events-page');
  await a.getByRole('link', { name: 'Webhooks' }).click();
  await a.locator('.empty', { hasText: 'No webhooks yet' }).waitFor({ timeout: T });
  await a.getByRole('button', { name: '+ New webhook' }).click();
  await a.getByLabel('URL', { exact: true }).fill(hookURL);
  await a.getByLabel('Name', { exact: true }).fill('console-hook');
  await a.getByRole('button', { name: 'Create webhook' }).click();
  await a.locator('#wh-secret code').waitFor({ timeout: T });
  result.webhookSecretShown = (await a.locator('#wh-secret code').innerText()).length > 0;
  // Events after the webhook exists: a second sandbox created and killed through the API.
  const second = await (await fetch(`${url}/v1/sandboxes`, { method: 'POST', headers: { Authorization: `Bearer ${keyA}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ template: 'host', timeout: 120 }) })).json();
  await api(keyA, 'DELETE', `/v1/sandboxes/${second.id}`);
  await a.getByRole('button', { name: 'Deliveries of console-hook' }).click();
  await a.locator('#deliveries .state.delivered').first().waitFor({ timeout: T });
  result.deliveries = await a.locator('#deliveries tbody').innerText();
  // Resend the oldest delivery: the receiver gets its event again, and the
  // list gains a row with the same event.
  // First every delivery of the second sandbox (its kill is the last).
  for (let i = 0; i < 20 && !(await a.locator('#deliveries tbody').innerText()).includes('killed'); i++) {
    await a.waitForTimeout(500);
    await a.getByRole('button', { name: 'Deliveries of console-hook' }).click();
    await a.locator('#deliveries').waitFor({ timeout: T });
  }
  const rowsBefore = await a.locator('#deliveries tbody tr').count();
  const receivedBefore = hookBodies.length;
  const oldest = a.locator('#deliveries tbody tr').last();
  const oldestEvent = await oldest.locator('td').first().innerText();
  await oldest.getByRole('button', { name: /^Resend / }).click();
  await a.waitForFunction((n) => document.querySelectorAll('#deliveries tbody tr').length > n, rowsBefore, { timeout: T });
  result.resent = { rows: await a.locator('#deliveries tbody tr').count() - rowsBefore, received: hookBodies.length - receivedBefore,
    sameEvent: (await a.locator('#deliveries tbody tr').first().locator('td').first().innerText()) === oldestEvent };
  result.hookReceived = hookBodies.length;
  await shot(a, 'webhooks');

  // Volumes: one made on the page, listed with its size, deleted.
  await a.getByRole('link', { name: 'Volumes' }).click();
  await a.locator('.empty', { hasText: 'No volumes yet' }).waitFor({ timeout: T });
  await a.getByRole('button', { name: '+ New volume' }).click();
  await a.getByLabel('Name', { exact: true }).fill('console-vol');
  await a.getByLabel('Size', { exact: true }).fill('64M');
  await a.getByRole('button', { name: 'Create volume' }).click();
  await a.locator('#volumes tbody tr', { hasText: 'console-vol' }).waitFor({ timeout: T });
  result.volumeRow = await a.locator('#volumes tbody tr', { hasText: 'console-vol' }).innerText();
  // Its content, browsed without a sandbox: a file in a directory written through the API.
  const volHeaders = { Authorization: `Bearer ${keyA}`, 'Content-Type': 'application/json' };
  await fetch(`${url}/v1/volumes/console-vol/files/mkdir`, { method: 'POST', headers: volHeaders, body: JSON.stringify({ path: '/data' }) });
  await fetch(`${url}/v1/volumes/console-vol/files?path=/data/in-volume.txt`, { method: 'PUT', headers: { ...volHeaders, 'Content-Type': 'application/octet-stream' }, body: 'in the volume\n' });
  await a.getByRole('button', { name: 'Browse volume console-vol' }).click();
  await a.getByRole('button', { name: 'data/' }).click();
  await a.locator('#volume-files tbody tr', { hasText: 'in-volume.txt' }).waitFor({ timeout: T });
  result.volumeBrowse = await a.locator('#volume-browser').innerText();
  await shot(a, 'volumes');
  await a.getByRole('button', { name: 'Delete volume console-vol' }).click();
  await a.getByRole('alertdialog').getByRole('button', { name: 'Delete' }).click();
  await a.locator('.empty', { hasText: 'No volumes yet' }).waitFor({ timeout: T });
  result.volumeDeleted = (await (await fetch(`${url}/v1/volumes`, { headers: { Authorization: `Bearer ${keyA}` } })).json()).length === 0;

  // Snapshots: none taken (a host sandbox has none to take), the empty state.
  await a.getByRole('link', { name: 'Snapshots' }).click();
  await a.locator('.empty', { hasText: 'No snapshots yet' }).waitFor({ timeout: T });
  await shot(a, 'snapshots');

  // Secrets: created, rotated (version 2), deleted; the value never on the page.
  const secretValue = 'console-secret-value-' + Math.random().toString(36).slice(2);
  await a.getByRole('link', { name: 'Secrets' }).click();
  await a.locator('.empty', { hasText: 'No secrets yet' }).waitFor({ timeout: T });
  await a.getByRole('button', { name: '+ New secret' }).click();
  await a.getByLabel('Name', { exact: true }).fill('CONSOLE_TOKEN');
  await a.getByLabel('Value', { exact: true }).fill(secretValue);
  await a.getByRole('button', { name: 'Create secret' }).click();
  await a.locator('#secrets tbody tr', { hasText: 'CONSOLE_TOKEN' }).waitFor({ timeout: T });
  await a.getByRole('button', { name: 'Rotate secret CONSOLE_TOKEN' }).click();
  await a.getByLabel('Value', { exact: true }).last().fill(secretValue + '-2');
  await a.getByRole('button', { name: 'Replace value' }).click();
  await a.locator('#secrets tbody tr', { hasText: 'CONSOLE_TOKEN' }).filter({ has: a.locator('td', { hasText: /^2$/ }) }).waitFor({ timeout: T });
  result.secretRow = await a.locator('#secrets tbody tr', { hasText: 'CONSOLE_TOKEN' }).innerText();
  result.secretVersion = (await (await api(keyA, 'GET', '/v1/secrets/CONSOLE_TOKEN')).json()).version;
  result.secretValueShown = (await a.content()).includes(secretValue);
  await shot(a, 'secrets');
  await a.getByRole('button', { name: 'Delete secret CONSOLE_TOKEN' }).click();
  await a.getByRole('alertdialog').getByRole('button', { name: 'Delete' }).click();
  await a.locator('.empty', { hasText: 'No secrets yet' }).waitFor({ timeout: T });
  result.secretDeleted = (await api(keyA, 'GET', '/v1/secrets/CONSOLE_TOKEN')).status;

  // API keys: who is signed in and how keys are managed, never the key.
  await a.getByRole('link', { name: 'API keys' }).first().click();
  await a.locator('#key-user').waitFor({ timeout: T });
  result.keyUser = await a.locator('#key-user').innerText();
  result.keyHint = await a.locator('#key-hint').innerText();
  result.keyManaged = await a.locator('#key-managed-text').innerText();
  result.keyShown = (await a.content()).includes(keyA);
  await shot(a, 'keys');

  await a.getByRole('link', { name: 'Templates' }).click();
  await a.getByRole('heading', { name: 'Templates', level: 1 }).waitFor({ timeout: T });
  await a.locator('#templates tbody tr').first().waitFor({ timeout: T });
  await shot(a, 'templates');
  await a.getByRole('link', { name: 'Pools' }).click();
  await a.getByRole('heading', { name: 'Warm pools' }).waitFor({ timeout: T });
  await shot(a, 'pools');
  if (await a.getByRole('link', { name: 'Admin' }).count() !== 0) throw new Error('a tenant sees the Admin page link');

  // The key stays in this tab's sessionStorage: no cookie, no localStorage.
  result.storage = await a.evaluate(() => ({ session: Object.keys(sessionStorage), local: localStorage.length, cookie: document.cookie }));

  // A phone's width: every page reflows without sideways scrolling.
  await a.setViewportSize({ width: 375, height: 740 });
  await a.getByRole('link', { name: 'Sandboxes' }).first().click();
  await a.locator(`tr[data-id="${id}"]`).waitFor({ timeout: T });
  await shot(a, 'narrow');
  for (const [hash, ready, name] of [['#/overview', '#chart-sandboxes', 'narrow-overview'], [`#/sandboxes/${id}/files`, 'tr[data-name="upload.txt"]', 'narrow-files'],
    [`#/sandboxes/${id}/resources`, '#chart-memory', 'narrow-resources'], [`#/sandboxes/${id}/terminal`, '#terminal', 'narrow-terminal'],
    ['#/events', '#events', 'narrow-events'], ['#/webhooks', '#webhooks', 'narrow-webhooks'], ['#/templates', '#templates tbody tr', 'narrow-templates'], ['#/pools', 'h1', 'narrow-pools'],
    [`#/sandboxes/${id}/history`, '#exec-history tbody tr', 'narrow-history'], ['#/snapshots', '.empty', 'narrow-snapshots'], ['#/volumes', '.empty', 'narrow-volumes'], ['#/secrets', '.empty', 'narrow-secrets'], ['#/keys', '#key-user', 'narrow-keys']]) {
    await a.evaluate((h) => { location.hash = h; }, hash);
    await a.locator(ready).first().waitFor({ timeout: T });
    await shot(a, name);
  }
  await a.setViewportSize({ width: 1280, height: 860 });
  await a.getByRole('link', { name: 'Sandboxes' }).first().click();
  await a.locator(`tr[data-id="${id}"]`).waitFor({ timeout: T });

  // Tenant B sees nothing of A's sandbox, in the list or by its address.
  const ctxB = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const b = await ctxB.newPage();
  watch(b, 'B');
  await signIn(b, keyB);
  await b.locator('#sandbox-count').filter({ hasText: /sandbox/ }).waitFor({ timeout: T });
  result.otherCount = await b.locator('#sandbox-count').textContent();
  result.otherRows = await b.locator(`tr[data-id="${id}"]`).count();
  await b.goto(`${url}/#/sandboxes/${id}/files`);
  await b.reload();
  result.otherDetail = await b.getByRole('alert').first().textContent({ timeout: T });
  await shot(b, 'other-tenant');
  await ctxB.close();

  // The operator's pages.
  const ctxO = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const o = await ctxO.newPage();
  watch(o, 'operator');
  await signIn(o, keyOp);
  await o.getByRole('link', { name: 'Admin' }).click();
  await o.locator('#tenants tbody tr').first().waitFor({ timeout: T });
  result.adminTenants = await o.locator('#tenants tbody').innerText();
  result.adminSandboxes = await o.locator('#all-sandboxes tbody').innerText();
  await o.locator('#metrics section[data-metric]').first().waitFor({ timeout: T });
  result.adminMetricFamilies = await o.locator('#metrics section[data-metric]').count();
  result.adminRawRows = await o.locator('#metrics td', { hasText: '_sum' }).count();
  await shot(o, 'admin');
  await o.getByRole('link', { name: 'Overview' }).click();
  await o.locator('#overview-tenants tbody tr').first().waitFor({ timeout: T });
  result.overviewTenants = await o.locator('#overview-tenants tbody').innerText();
  result.overviewPools = await o.locator('#overview-pools tbody').innerText();
  await shot(o, 'overview-operator');
  await o.getByRole('link', { name: 'Pools' }).click();
  await o.locator('#pools tbody tr').first().waitFor({ timeout: T });
  result.pools = await o.locator('#pools tbody').innerText();
  await shot(o, 'pools-operator');
  // A build with its live log; the new template appears in the list.
  await o.getByRole('link', { name: 'Templates' }).click();
  await o.getByRole('heading', { name: 'Build from a Dockerfile' }).waitFor({ timeout: T });
  await o.getByLabel('Tag', { exact: true }).fill('console-built:1');
  await o.getByLabel('Dockerfile', { exact: true }).fill('FROM scratch\nLABEL made=console\n');
  await o.getByRole('button', { name: 'Build' }).click();
  await o.locator('#build-log', { hasText: 'Done: console-built:1' }).waitFor({ timeout: T });
  result.buildLog = await o.locator('#build-log').textContent();
  await o.locator('#templates tbody th', { hasText: 'console-built:1' }).waitFor({ timeout: T });
  await shot(o, 'build');
  // A failing build shows the error as the API words it.
  await o.getByLabel('Dockerfile', { exact: true }).fill('FROM scratch\nBOGUS x\n');
  await o.getByRole('button', { name: 'Build' }).click();
  await o.locator('#build-log', { hasText: 'Error' }).waitFor({ timeout: T });
  result.buildError = await o.locator('#build-log').textContent();
  await ctxO.close();

  // Dark mode (prefers-color-scheme): the same pages, checked the same way.
  const ctxD = await browser.newContext({ viewport: { width: 1280, height: 860 }, colorScheme: 'dark' });
  const d = await ctxD.newPage();
  watch(d, 'dark');
  await signIn(d, keyA);
  result.darkBackground = await d.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await shot(d, 'dark-sandboxes');
  await d.getByRole('link', { name: 'Overview' }).click();
  await d.locator('#chart-sandboxes polyline').first().waitFor({ timeout: T });
  await shot(d, 'dark-overview');
  await d.goto(`${url}/#/sandboxes/${id}/resources`);
  await d.locator('#chart-memory polyline').waitFor({ timeout: T });
  await shot(d, 'dark-resources');
  await d.goto(`${url}/#/sandboxes/${id}/history`);
  await d.locator('#exec-history tbody tr').first().waitFor({ timeout: T });
  await shot(d, 'dark-history');
  await d.goto(`${url}/#/secrets`);
  await d.locator('.empty', { hasText: 'No secrets yet' }).waitFor({ timeout: T });
  await shot(d, 'dark-secrets');
  await ctxD.close();

  // Kill the sandbox (with its confirmation) and see it go.
  await a.getByRole('button', { name: `Kill ${id}` }).click();
  await a.getByRole('alertdialog').waitFor({ timeout: T });
  await shot(a, 'confirm');
  await a.getByRole('alertdialog').getByRole('button', { name: 'Kill' }).click();
  await a.locator(`tr[data-id="${id}"]`).waitFor({ state: 'detached', timeout: T });
  res = await api(keyA, 'GET', `/v1/sandboxes/${id}`);
  result.afterKill = res.status;
  // A stored key that no longer works sends the tab back to signing in.
  await a.evaluate(() => sessionStorage.setItem('agentbox.console.key', 'revoked-key'));
  await a.reload();
  await a.getByLabel('API key').waitFor({ timeout: T });
  result.revoked = await a.getByRole('alert').textContent({ timeout: T });
  result.revokedStorage = await a.evaluate(() => sessionStorage.length);
  await ctxA.close();
} catch (e) {
  result.error = String(e?.stack || e);
} finally {
  await browser.close();
  hookServer.close();
}
console.log(JSON.stringify(result));
process.exit(result.error ? 1 : 0);
