// Opens a desktop URL in Debian's Chromium (playwright-core) as a person
// would, waits until noVNC is connected, then waits until its canvas shows
// each colour given, in turn, over most of the screen: what the sandbox's
// screen shows, as the person sees it. Driven by test/e2e
// TestAgentscopeBrowser (agentscope's BrowserSandbox.desktop_url).
//
//   node desktop_colours.cjs URL OUT.png RRGGBB...
//
// Prints one JSON object per line: first the page's
// {status, url, state, label}; then, for each colour, {seen, share} once
// at least half of the canvas has it, after which it reads one line from
// stdin before it looks for the next colour (the test changes the
// sandbox's screen in between); last {done, problems}. A colour not seen
// within 30 s ends the run with {timeout, colour, share}, the end of stdin
// ends it silently.
const { chromium } = require('playwright-core');
const readline = require('readline');

(async () => {
  const [url, out, ...colours] = process.argv.slice(2);
  const T = 30000;
  const say = (o) => console.log(JSON.stringify(o));
  const stdin = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    timeout: T,
  });
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.on('pageerror', (e) => problems.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
    const resp = await page.goto(url, { timeout: T });
    const head = { status: resp.status(), url: page.url() };
    if (resp.status() !== 200) {
      head.body = (await resp.text()).slice(0, 500);
      say(head);
      return;
    }
    await page.waitForFunction(() => document.getElementById('status').dataset.state !== 'connecting', null, { timeout: T });
    head.state = await page.evaluate(() => document.getElementById('status').dataset.state);
    head.label = await page.evaluate(() => document.getElementById('status').textContent);
    say(head);
    if (head.state !== 'connected') return;
    // The share of sampled canvas pixels within 6 of a colour on every
    // channel (the VNC session is true colour; the margin only absorbs a
    // rounding).
    await page.evaluate(() => {
      window.colourShare = (w) => {
        const c = document.querySelector('#screen canvas');
        if (!c || c.width < 100) return 0;
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0, hit = 0;
        for (let p = 0; p < d.length; p += 4 * 61) {
          n++;
          if (Math.abs(d[p] - w[0]) <= 6 && Math.abs(d[p + 1] - w[1]) <= 6 && Math.abs(d[p + 2] - w[2]) <= 6) hit++;
        }
        return hit / n;
      };
    });
    const share = (w) => window.colourShare(w);
    for (const [i, hex] of colours.entries()) {
      if (i > 0 && (await stdin.next()).done) return;
      const want = [0, 2, 4].map((k) => parseInt(hex.slice(k, k + 2), 16));
      try {
        await page.waitForFunction((w) => window.colourShare(w) >= 0.5, want, { timeout: T, polling: 250 });
      } catch (e) {
        say({ timeout: true, colour: hex, share: await page.evaluate(share, want) });
        await page.screenshot({ path: out });
        return;
      }
      say({ seen: hex, share: await page.evaluate(share, want) });
    }
    await page.screenshot({ path: out });
  } finally {
    await browser.close();
  }
  say({ done: true, problems });
})().catch((e) => { console.error(e); process.exit(1); });
