// Opens @e2b/desktop's stream URL (noVNC's vnc.html served by websockify
// in the sandbox, through the daemon's preview of port 6080) in Debian's
// Chromium with the owner's key, and waits until noVNC is connected and
// draws the desktop. Driven by test/e2e TestE2BDesktop.
//
//   node e2b_stream.cjs URL KEY
const { chromium } = require('playwright-core');

(async () => {
  const [url, key] = process.argv.slice(2);
  const T = 30000;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    timeout: T,
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 }, extraHTTPHeaders: { Authorization: 'Bearer ' + key } });
    const resp = await page.goto(url, { timeout: T });
    await page.waitForFunction(() => document.documentElement.classList.contains('noVNC_connected'), null, { timeout: T });
    const colors = await page.waitForFunction(() => {
      const c = document.querySelector('#noVNC_container canvas');
      if (!c || c.width < 100) return 0;
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      const seen = new Set();
      for (let i = 0; i < d.length; i += 4 * 97) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      return seen.size >= 10 ? seen.size : 0;
    }, null, { timeout: T, polling: 250 });
    console.log(JSON.stringify({ status: resp.status(), connected: true, colors: await colors.jsonValue() }));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
