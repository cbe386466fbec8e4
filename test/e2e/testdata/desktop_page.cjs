// Opens the desktop page of a sandbox (a signed link) in Debian's Chromium
// (playwright-core) as a person would, waits until noVNC is connected and
// the desktop is drawn, saves a screenshot and, when asked, clicks at
// desktop coordinates. Driven by test/e2e TestDesktopTemplate.
//
//   node desktop_page.cjs URL OUT.png [click X Y [force]]
//
// "force" turns the page's client-side view-only off before the click, so
// that the click really is sent: what keeps it from the desktop must then
// be the server. Prints one JSON object.
const { chromium } = require('playwright-core');

(async () => {
  const [url, out, action, x, y, force] = process.argv.slice(2);
  const T = 30000;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    timeout: T,
  });
  const result = { problems: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.on('pageerror', (e) => result.problems.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') result.problems.push(m.text()); });
    const resp = await page.goto(url, { timeout: T });
    result.status = resp.status();
    if (resp.status() !== 200) {
      console.log(JSON.stringify(result));
      return;
    }
    await page.waitForFunction(() => document.getElementById('status').dataset.state !== 'connecting', null, { timeout: T });
    result.state = await page.evaluate(() => document.getElementById('status').dataset.state);
    result.label = await page.evaluate(() => document.getElementById('status').textContent);
    if (result.state === 'connected') {
      // The desktop is drawn: the canvas holds more than a few colours.
      await page.waitForFunction(() => {
        const c = document.querySelector('#screen canvas');
        if (!c || c.width < 100) return false;
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let i = 0; i < d.length; i += 4 * 97) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        return seen.size >= 10;
      }, null, { timeout: T, polling: 250 });
      const box = await page.evaluate(() => {
        const c = document.querySelector('#screen canvas');
        const r = c.getBoundingClientRect();
        return { left: r.left, top: r.top, sx: r.width / c.width, sy: r.height / c.height, width: c.width, height: c.height };
      });
      result.canvas = box;
      await page.screenshot({ path: out });
      if (action === 'click') {
        if (force === 'force') await page.evaluate(() => { window.agentboxDesktop.viewOnly = false; });
        const px = box.left + Number(x) * box.sx, py = box.top + Number(y) * box.sy;
        await page.mouse.move(px, py);
        await page.mouse.down();
        await page.mouse.up();
        // Closing the browser must not drop the click: wait until the
        // WebSocket has handed every byte to the network (TCP then
        // delivers them before the close).
        await page.waitForFunction(() => window.agentboxDesktop._sock._websocket.bufferedAmount === 0, null, { timeout: T });
        result.clicked = [px, py];
      }
    }
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(result));
})().catch((e) => { console.error(e); process.exit(1); });
