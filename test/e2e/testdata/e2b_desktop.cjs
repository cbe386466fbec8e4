// The unmodified @e2b/desktop SDK against agentbox's E2B API, configured
// by nothing but the environment `agentbox e2b env` prints. Driven by
// test/e2e TestE2BDesktop, which checks in the sandbox (through the native
// API) what this script did; it prints one JSON object.
const { Sandbox } = require('@e2b/desktop');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

(async () => {
  const out = {};
  const t0 = Date.now();
  const desktop = await Sandbox.create('desktop', { timeoutMs: 600_000 });
  out.id = desktop.sandboxId;
  out.createMs = Date.now() - t0;
  try {
    const png = await desktop.screenshot();
    out.screenshotMs = Date.now() - t0;
    out.png = Buffer.from(png).toString('base64');
    out.size = await desktop.getScreenSize();

    // xev prints the events its window gets: the test reads them back.
    await desktop.commands.run('xev -geometry 400x300+300+200 > /tmp/e2b-xev.log 2>&1', { background: true });
    let geo = null;
    for (let i = 0; i < 100 && !geo; i++) {
      const r = await desktop.commands.run("xdotool search --onlyvisible --name '^Event Tester$' getwindowgeometry --shell %@ 2>/dev/null || true");
      const m = Object.fromEntries(r.stdout.trim().split('\n').filter(Boolean).map((l) => l.split('=')));
      if (Number(m.WIDTH) >= 100) geo = m; else await sleep(200);
    }
    if (!geo) throw new Error('no xev window');
    const cx = Number(geo.X) + Math.floor(Number(geo.WIDTH) / 2), cy = Number(geo.Y) + Math.floor(Number(geo.HEIGHT) / 2);
    out.target = [cx, cy];

    await desktop.moveMouse(cx - 20, cy - 20);
    out.cursor = await desktop.getCursorPosition();
    await desktop.leftClick(cx, cy);
    await desktop.write('hi e2b');
    await desktop.press('enter');
    await desktop.press(['ctrl', 'a']);
    await desktop.scroll('down', 2);

    await desktop.stream.start();
    out.streamUrl = desktop.stream.getUrl();
    out.viewUrl = desktop.stream.getUrl({ viewOnly: true });
    out.authKeyErr = null;
    try { desktop.stream.getAuthKey(); } catch (e) { out.authKeyErr = e.message; }
    console.log(JSON.stringify(out));
    // The stream's background command keeps a connection open: leave
    // the sandbox (and its stream) to the test.
    process.exit(0);
  } catch (e) {
    await desktop.kill().catch(() => {});
    throw e;
  }
})().catch((e) => { console.error(e); process.exit(1); });
