import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';
import { h, clear, announce, confirmDialog, errorBox } from '../dom';
import { duration, bytes, cpuRates, joinPath, parentPath, listeningPorts } from '../format';
import type { Sandbox, Entry } from '../api';
import type { Session } from '../session';
import { actions, history, sampleStats } from './sandboxes';
import { chart } from './common';

const TABS: [string, string][] = [
  ['terminal', 'Terminal'], ['files', 'Files'], ['logs', 'Logs'], ['resources', 'Resources'],
  ['ports', 'Ports'], ['history', 'Exec history'],
];
// No Desktop tab: there are no desktop sandboxes yet (docs/console.md).

export function sandboxView(main: HTMLElement, s: Session, id: string, tab: string): () => void {
  const cleanups: (() => void)[] = [];
  const err = h('div', { 'aria-live': 'assertive' });
  const details = h('dl', { class: 'details' });
  const acts = h('div', { class: 'row actions' });
  let current: Sandbox | null = null;
  let gone = false;

  const renderDetails = (sb: Sandbox) => {
    current = sb;
    clear(details);
    const now = Date.now();
    const item = (k: string, v: string) => [h('dt', {}, k), h('dd', {}, v)];
    details.append(...item('State', sb.state), ...item('Template', sb.template), ...item('Owner', s.info.user),
      ...item('Age', duration(now - Date.parse(sb.created_at))), ...item('Time left', duration(Date.parse(sb.end_at) - now)),
      ...item('Memory limit', bytes(sb.resources?.memory)), ...item('CPUs', String(sb.resources?.cpus ?? '—')),
      ...item('Network', sb.network?.mode ?? 'none'),
      ...item('Metadata', Object.entries(sb.metadata ?? {}).map(([k, v]) => `${k}=${v}`).join(', ') || '—'));
    clear(acts);
    acts.append(...actions(s, sb, (action) => {
      if (action === 'Kill') location.hash = '#/sandboxes'; // it is gone: back to the list
      else void load();
    }, err));
  };
  const load = async () => {
    try {
      renderDetails(await s.api.get(id));
    } catch (ex) {
      clear(err);
      err.appendChild(errorBox(ex));
      if ((ex as { status?: number }).status === 404) {
        gone = true;
        clear(acts);
        acts.appendChild(h('a', { href: '#/sandboxes' }, 'Back to sandboxes'));
      }
    }
  };
  const poll = window.setInterval(() => { if (!gone) void load(); }, 5000);
  cleanups.push(() => window.clearInterval(poll));

  const tablist = h('div', { role: 'tablist', 'aria-label': 'Sandbox views', class: 'tabs' });
  const panel = h('section', { role: 'tabpanel', id: 'panel', 'aria-labelledby': `tab-${tab}`, tabindex: 0, class: 'panel' });
  TABS.forEach(([key, label]) => {
    const a = h('a', { role: 'tab', id: `tab-${key}`, href: `#/sandboxes/${encodeURIComponent(id)}/${key}`,
      'aria-selected': key === tab ? 'true' : 'false', 'aria-controls': 'panel', tabindex: key === tab ? 0 : -1 }, label);
    tablist.appendChild(a);
  });
  // Arrow keys move between tabs (the ARIA tabs pattern).
  tablist.addEventListener('keydown', (e) => {
    const tabs = [...tablist.querySelectorAll<HTMLAnchorElement>('[role=tab]')];
    const i = tabs.indexOf(document.activeElement as HTMLAnchorElement);
    if (i < 0) return;
    const next = e.key === 'ArrowRight' ? (i + 1) % tabs.length : e.key === 'ArrowLeft' ? (i - 1 + tabs.length) % tabs.length : -1;
    if (next >= 0) { e.preventDefault(); tabs[next].focus(); tabs[next].click(); }
  });

  main.append(h('p', {}, h('a', { href: '#/sandboxes' }, '← Sandboxes')),
    h('h1', {}, 'Sandbox ', h('code', {}, id)), err, details, acts, tablist, panel);
  void load();

  switch (tab) {
    case 'terminal': cleanups.push(terminalTab(panel, s, id)); break;
    case 'files': cleanups.push(filesTab(panel, s, id)); break;
    case 'logs': cleanups.push(logsTab(panel, s, id)); break;
    case 'resources': cleanups.push(resourcesTab(panel, s, id, () => current)); break;
    case 'ports': portsTab(panel, s, id); break;
    case 'history':
      panel.append(h('h2', {}, 'Exec history'), h('p', {}, 'The API does not keep a history of the commands run in a sandbox yet; the Logs tab shows its lifecycle events.'));
      break;
    default:
      panel.append(h('p', {}, `No view named ${tab}.`));
  }
  return () => cleanups.forEach((c) => c());
}

function terminalTab(panel: HTMLElement, s: Session, id: string): () => void {
  const status = h('p', { class: 'muted', id: 'term-status', 'aria-live': 'polite' }, 'Connecting…');
  const box = h('div', { class: 'terminal', id: 'terminal', 'aria-label': 'Terminal', role: 'application' });
  const reconnect = h('button', { type: 'button' }, 'Reconnect');
  const sr = h('input', { type: 'checkbox', id: 'term-sr' });
  panel.append(h('h2', {}, 'Terminal'), status, box,
    h('div', { class: 'row' }, reconnect, sr, h('label', { for: 'term-sr' }, 'Screen reader mode')),
    h('p', { class: 'muted small' }, 'Tab and arrow keys go to the terminal while it has focus; press Escape then Tab to leave it.'));
  const term = new Terminal({ cursorBlink: true, fontSize: 14, convertEol: false, scrollback: 2000, screenReaderMode: false });
  sr.addEventListener('change', () => { term.options.screenReaderMode = sr.checked; });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  // Escape releases keyboard focus to the page (xterm keeps Tab otherwise).
  let escaped = false;
  term.attachCustomKeyEventHandler((e) => {
    if (e.type === 'keydown' && e.key === 'Escape') { escaped = true; return true; }
    if (e.type === 'keydown' && e.key === 'Tab' && escaped) { escaped = false; term.blur(); return false; }
    if (e.type === 'keydown') escaped = false;
    return true;
  });
  try { fit.fit(); } catch { /* not laid out yet */ }
  let ws: WebSocket | null = null;
  let closed = false;
  const enc = new TextEncoder();
  const dataSub = term.onData((d) => { if (ws?.readyState === WebSocket.OPEN) ws.send(enc.encode(d)); });
  const binSub = term.onBinary((d) => {
    if (ws?.readyState !== WebSocket.OPEN) return;
    const b = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 0xff;
    ws.send(b);
  });
  const resizeSub = term.onResize(({ cols, rows }) => {
    if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
  });
  const onWinResize = () => { try { fit.fit(); } catch { /* hidden */ } };
  window.addEventListener('resize', onWinResize);

  const connect = async () => {
    ws?.close();
    status.textContent = 'Connecting…';
    try {
      // A ticket bought with the key, offered as a websocket subprotocol:
      // the key itself never leaves the Authorization header.
      const t = await s.api.ptyTicket(id);
      if (closed) return;
      const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
      const url = `${proto}//${location.host}/v1/sandboxes/${encodeURIComponent(id)}/pty?cols=${term.cols}&rows=${term.rows}`;
      const sock = new WebSocket(url, t.protocols);
      sock.binaryType = 'arraybuffer';
      ws = sock;
      sock.onopen = () => { status.textContent = 'Connected'; box.dataset.connected = 'true'; term.focus(); };
      sock.onmessage = (ev) => {
        if (typeof ev.data === 'string') {
          try {
            const c = JSON.parse(ev.data) as { type: string; exit_code?: number };
            if (c.type === 'exit') status.textContent = `The shell exited (${c.exit_code ?? '?'})`;
          } catch { /* ignore */ }
          return;
        }
        term.write(new Uint8Array(ev.data as ArrayBuffer));
      };
      sock.onclose = (ev) => {
        box.dataset.connected = 'false';
        if (!status.textContent?.startsWith('The shell exited')) status.textContent = `Disconnected${ev.reason ? `: ${ev.reason}` : ''}`;
      };
    } catch (ex) {
      status.textContent = String(ex instanceof Error ? ex.toString() : ex);
    }
  };
  reconnect.addEventListener('click', () => void connect());
  void connect();
  return () => {
    closed = true;
    window.removeEventListener('resize', onWinResize);
    dataSub.dispose(); binSub.dispose(); resizeSub.dispose();
    ws?.close();
    term.dispose();
  };
}

function filesTab(panel: HTMLElement, s: Session, id: string): () => void {
  let dir = '/home/user';
  const err = h('div', { 'aria-live': 'assertive' });
  const pathInput = h('input', { id: 'dir', name: 'dir', value: dir, autocomplete: 'off' });
  const go = h('form', { class: 'row', 'aria-label': 'Directory' }, h('label', { for: 'dir' }, 'Directory'), pathInput, h('button', { type: 'submit' }, 'Open'));
  const up = h('button', { type: 'button' }, 'Parent directory');
  const upload = h('input', { id: 'upload', type: 'file', multiple: true });
  const folder = h('input', { id: 'new-folder', name: 'folder', autocomplete: 'off', required: true });
  const mk = h('form', { class: 'row', 'aria-label': 'New folder' }, h('label', { for: 'new-folder' }, 'New folder'), folder, h('button', { type: 'submit' }, 'Create folder'));
  mk.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(err);
    try { await s.api.mkdir(id, joinPath(dir, folder.value.trim())); announce(`Created ${folder.value}`); folder.value = ''; void open(dir); } catch (ex) { err.appendChild(errorBox(ex)); }
  });
  const list = h('tbody', {});
  const editor = h('div', { id: 'editor' });
  panel.append(h('h2', {}, 'Files'), go,
    h('div', { class: 'row' }, up, h('label', { for: 'upload' }, 'Upload to this directory'), upload), mk,
    err,
    h('div', { class: 'scroll' }, h('table', { class: 'list', id: 'files' },
      h('caption', { class: 'sr-only' }, 'Files in the directory'),
      h('thead', {}, h('tr', {}, ...['Name', 'Type', 'Size', 'Modified', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))), list)),
    editor);

  const open = async (p: string) => {
    clear(err);
    try {
      const { entries } = await s.api.files(id, p);
      dir = p;
      pathInput.value = p;
      render(entries);
    } catch (ex) {
      err.appendChild(errorBox(ex));
    }
  };
  const render = (entries: Entry[]) => {
    clear(list);
    entries.sort((a, b) => (a.type === 'dir' ? 0 : 1) - (b.type === 'dir' ? 0 : 1) || a.name.localeCompare(b.name));
    for (const e of entries) {
      const name = e.type === 'dir'
        ? h('button', { type: 'button', class: 'link' }, `${e.name}/`)
        : h('span', {}, e.name);
      if (e.type === 'dir') name.addEventListener('click', () => void open(e.path));
      const acts: HTMLElement[] = [];
      if (e.type === 'file') {
        const dl = h('button', { type: 'button', 'aria-label': `Download ${e.name}` }, 'Download');
        dl.addEventListener('click', () => void download(e));
        const ed = h('button', { type: 'button', 'aria-label': `Edit ${e.name}` }, 'Edit');
        ed.addEventListener('click', () => void edit(e.path));
        acts.push(dl, ed);
      }
      const del = h('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${e.name}` }, 'Delete');
      del.addEventListener('click', async () => {
        if (!(await confirmDialog(`Delete ${e.name}?`, `${e.path} is removed from the sandbox${e.type === 'dir' ? ' with everything in it' : ''}.`, 'Delete'))) return;
        try { await s.api.remove(id, e.path); announce(`Deleted ${e.name}`); void open(dir); } catch (ex) { err.appendChild(errorBox(ex)); }
      });
      acts.push(del);
      list.appendChild(h('tr', { 'data-name': e.name },
        h('th', { scope: 'row' }, name), h('td', {}, e.type), h('td', {}, e.type === 'file' ? bytes(e.size) : ''),
        h('td', {}, e.modified_at ? new Date(e.modified_at).toLocaleString() : ''), h('td', { class: 'actions' }, ...acts)));
    }
    if (entries.length === 0) list.appendChild(h('tr', {}, h('td', { colspan: 5 }, 'Empty directory')));
  };
  const download = async (e: Entry) => {
    try {
      const blob = await s.api.read(id, e.path);
      const url = URL.createObjectURL(blob);
      const a = h('a', { href: url, download: e.name });
      document.body.appendChild(a);
      a.click();
      a.remove();
      window.setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (ex) { err.appendChild(errorBox(ex)); }
  };
  const edit = async (p: string) => {
    clear(editor);
    try {
      const text = await (await s.api.read(id, p)).text();
      const area = h('textarea', { id: 'edit-area', rows: 14, spellcheck: 'false' });
      area.value = text;
      const save = h('button', { type: 'submit' }, 'Save');
      const close = h('button', { type: 'button' }, 'Close');
      const msg = h('span', { class: 'muted', 'aria-live': 'polite', id: 'edit-status' });
      const form = h('form', { class: 'card', 'aria-labelledby': 'edit-title' },
        h('h3', { id: 'edit-title' }, 'Editing ', h('code', {}, p)),
        h('label', { for: 'edit-area', class: 'sr-only' }, `Contents of ${p}`), area,
        h('div', { class: 'row' }, save, close, msg));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        try { await s.api.write(id, p, area.value); msg.textContent = 'Saved'; void open(dir); } catch (ex) { msg.textContent = String(ex instanceof Error ? ex.toString() : ex); }
      });
      close.addEventListener('click', () => clear(editor));
      editor.appendChild(form);
      area.focus();
    } catch (ex) { err.appendChild(errorBox(ex)); }
  };
  go.addEventListener('submit', (e) => { e.preventDefault(); void open(pathInput.value.trim() || '/'); });
  up.addEventListener('click', () => void open(parentPath(dir)));
  upload.addEventListener('change', async () => {
    const files = [...(upload.files ?? [])];
    for (const f of files) {
      try { await s.api.write(id, joinPath(dir, f.name), f); announce(`Uploaded ${f.name}`); } catch (ex) { err.appendChild(errorBox(ex)); }
    }
    upload.value = '';
    void open(dir);
  });
  void open(dir);
  return () => {};
}

function logsTab(panel: HTMLElement, s: Session, id: string): () => void {
  const out = h('ol', { class: 'logs', 'aria-label': 'Sandbox log entries' });
  const err = h('div', {});
  panel.append(h('h2', {}, 'Logs'), h('p', { class: 'muted' }, 'Lifecycle events and the agent log, refreshed every 2 seconds.'), err,
    h('div', { role: 'log', 'aria-live': 'polite', 'aria-label': 'Sandbox log' }, out));
  let shown = 0;
  const poll = async () => {
    try {
      const { logs } = await s.api.logs(id);
      if (logs.length < shown) { clear(out); shown = 0; }
      for (const l of logs.slice(shown)) {
        const fields = l.fields ? ' ' + Object.entries(l.fields).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ') : '';
        out.appendChild(h('li', { class: `lvl-${l.level}` }, h('time', { datetime: l.timestamp }, new Date(l.timestamp).toLocaleTimeString()), ` ${l.level} ${l.message}${fields}`));
      }
      shown = logs.length;
      clear(err);
    } catch (ex) { clear(err); err.appendChild(errorBox(ex)); }
  };
  void poll();
  const t = window.setInterval(() => void poll(), 2000);
  return () => window.clearInterval(t);
}

function resourcesTab(panel: HTMLElement, s: Session, id: string, current: () => Sandbox | null): () => void {
  const charts = h('div', { class: 'charts' });
  panel.append(h('h2', {}, 'Resources'), h('p', { class: 'muted' }, 'Sampled every 2 seconds while this page is open (the last minute).'), charts);
  const draw = async () => {
    const sb = current() ?? { id, state: 'running' } as Sandbox;
    await sampleStats(s, [sb]);
    const samples = history.get(id) ?? [];
    const cpu = cpuRates(samples);
    const mem = samples.map((x) => x.memoryBytes);
    clear(charts);
    charts.append(
      chart(cpu, 'CPU (cores)', cpu.length ? cpu[cpu.length - 1].toFixed(2) : 'no data', sb.resources?.cpus ?? 1),
      chart(mem, 'Memory', mem.length ? bytes(mem[mem.length - 1]) : 'no data', sb.resources?.memory));
  };
  void draw();
  const t = window.setInterval(() => void draw(), 2000);
  return () => window.clearInterval(t);
}

function portsTab(panel: HTMLElement, s: Session, id: string): void {
  const list = h('ul', { class: 'ports' });
  const err = h('div', {});
  const refresh = h('button', { type: 'button' }, 'Look again');
  panel.append(h('h2', {}, 'Ports'), h('p', { class: 'muted' }, 'TCP ports listening in the sandbox, each with a preview link (a signed token valid for an hour, on an origin of its own).'), refresh, err, list);
  const scan = async () => {
    clear(list); clear(err);
    try {
      const texts = await Promise.all(['/proc/net/tcp', '/proc/net/tcp6'].map((p) => s.api.read(id, p).then((b) => b.text()).catch(() => '')));
      const ports = [...new Set(texts.flatMap(listeningPorts))].sort((a, b) => a - b);
      if (ports.length === 0) { list.appendChild(h('li', {}, 'No port is listening.')); return; }
      for (const port of ports) {
        const li = h('li', {}, `${port} `);
        const btn = h('button', { type: 'button' }, `Preview link for ${port}`);
        btn.addEventListener('click', async () => {
          try {
            const t = await s.api.previewToken(id, port);
            btn.replaceWith(t.url
              ? h('a', { href: t.url, target: '_blank', rel: 'noopener noreferrer' }, `Open port ${port}`)
              : h('span', {}, 'No preview domain is configured; programs can use ', h('code', {}, t.path)));
          } catch (ex) { err.appendChild(errorBox(ex)); }
        });
        li.appendChild(btn);
        list.appendChild(li);
      }
    } catch (ex) { err.appendChild(errorBox(ex)); }
  };
  refresh.addEventListener('click', () => void scan());
  void scan();
}
