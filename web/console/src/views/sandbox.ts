import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';
import { h, clear, announce, confirmDialog, errorBox } from '../dom';
import { duration, runTime, bytes, cpuRates, joinPath, parentPath, listeningPorts } from '../format';
import type { Sandbox, Entry, Event } from '../api';
import type { Session } from '../session';
import { actions, history, sampleStats } from './sandboxes';
import { chart, loading, table } from './common';
import { describeEvent, isFailure } from '../eventtext';

const TABS: [string, string][] = [
  ['terminal', 'Terminal'], ['files', 'Files'], ['events', 'Events'], ['resources', 'Resources'],
  ['logs', 'Logs'], ['ports', 'Ports'], ['desktop', 'Desktop'], ['history', 'Exec history'],
];

export function sandboxView(main: HTMLElement, s: Session, id: string, tab: string): () => void {
  const cleanups: (() => void)[] = [];
  const err = h('div', { 'aria-live': 'assertive' });
  const stateBadge = h('span', { class: 'state' }, '…');
  const chips = h('ul', { class: 'chips', 'aria-label': 'Sandbox details' }, h('li', { class: 'loading' }, 'Loading…'));
  const acts = h('div', { class: 'row actions' });
  let current: Sandbox | null = null;
  let gone = false;
  const ide = ideLink(s, id, err);

  // One compact header (state, template, owner, limits, time left, then
  // the metadata): the tabs stay in the first view.
  const renderDetails = (sb: Sandbox) => {
    current = sb;
    stateBadge.className = `state ${sb.state}`;
    stateBadge.textContent = sb.state;
    const now = Date.now();
    const chip = (k: string, v: string, key?: string) => h('li', { class: 'chip', 'data-detail': key ?? k.toLowerCase() }, h('b', {}, k), v);
    const md = Object.entries(sb.metadata ?? {});
    chips.replaceChildren(
      chip('Template', sb.template), chip('Owner', s.info.user),
      chip('Time left', duration(Date.parse(sb.end_at) - now), 'time-left'), chip('Age', duration(now - Date.parse(sb.created_at))),
      chip('Memory', bytes(sb.resources?.memory)), chip('CPUs', String(sb.resources?.cpus ?? '—')),
      chip('Network', sb.network?.mode ?? 'none'), chip('Isolation', sb.isolation ?? 'container'),
      ...(md.length ? md : [['metadata', '—']]).map(([k, v]) => h('li', { class: 'chip', 'data-detail': 'metadata' }, h('b', {}, k), v)));
    clear(acts);
    acts.append(...copyActions(s, sb, err), ...actions(s, sb, (action) => {
      if (action === 'Kill') location.hash = '#/sandboxes'; // it is gone: back to the list
      else void load();
    }, err));
    if (isCodeServer(sb.template) && sb.state === 'running') acts.append(ide());
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
        chips.replaceChildren();
        stateBadge.className = 'state lost';
        stateBadge.textContent = 'gone';
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

  main.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('ol', {}, h('li', {}, h('a', { href: '#/sandboxes' }, 'Sandboxes')), h('li', { 'aria-current': 'page' }, id))),
    h('header', { class: 'sb-head' },
      h('div', { class: 'title' }, h('h1', {}, 'Sandbox ', h('code', {}, id)), stateBadge, acts),
      chips),
    err, tablist, panel);
  void load();

  switch (tab) {
    case 'terminal': cleanups.push(terminalTab(panel, s, id)); break;
    case 'files': cleanups.push(filesTab(panel, s, id)); break;
    case 'logs': cleanups.push(logsTab(panel, s, id)); break;
    case 'events': cleanups.push(eventsTab(panel, s, id)); break;
    case 'resources': cleanups.push(resourcesTab(panel, s, id, () => current)); break;
    case 'ports': portsTab(panel, s, id); break;
    case 'history': cleanups.push(historyTab(panel, s, id)); break;
    case 'desktop': desktopTab(panel, s, id); break;
    default:
      panel.append(h('p', {}, `No view named ${tab}.`));
  }
  return () => cleanups.forEach((c) => c());
}

// CODE_SERVER_PORT is where the code-server template's editor listens in
// its sandbox (templates/code-server/agentbox-code-server).
const CODE_SERVER_PORT = 13337;

function isCodeServer(template: string): boolean {
  return template === 'code-server' || template.startsWith('code-server:');
}

/**
 * VS Code of a code-server sandbox: a signed preview link (an hour, on the
 * sandbox port's own origin), asked for once and kept while the page
 * shows; it opens in a tab of its own.
 */
function ideLink(s: Session, id: string, err: HTMLElement): () => HTMLElement {
  const slot = h('span', { class: 'ide' }, 'VS Code…');
  let asked = false;
  return () => {
    if (!asked) {
      asked = true;
      s.api.previewToken(id, CODE_SERVER_PORT).then((t) => {
        slot.replaceChildren(t.url
          ? h('a', { href: t.url, target: '_blank', rel: 'noopener noreferrer', id: 'open-ide', class: 'button' }, 'Open in VS Code')
          : h('span', { class: 'muted small' }, 'VS Code needs a preview domain (PREVIEW_DOMAIN) on the server.'));
      }).catch((ex) => { asked = false; slot.replaceChildren(); err.appendChild(errorBox(ex)); });
    }
    return slot;
  };
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

/** The directories the Files tab tries first: the sandbox's work directory, then the user's home. */
const START_DIRS = ['/workspace', '/home/user', '/'];
const IMAGE = /\.(png|jpe?g|gif|webp|svg|bmp|ico)$/i;
const PREVIEW_MAX = 2 << 20;

function filesTab(panel: HTMLElement, s: Session, id: string): () => void {
  let dir = START_DIRS[0];
  const err = h('div', { 'aria-live': 'assertive' });
  const pathInput = h('input', { id: 'dir', name: 'dir', value: dir, autocomplete: 'off', size: 28 });
  const go = h('form', { 'aria-label': 'Directory' }, h('label', { for: 'dir', class: 'sr-only' }, 'Directory'), pathInput, h('button', { type: 'submit' }, 'Open'));
  const up = h('button', { type: 'button' }, 'Parent directory');
  const upload = h('input', { id: 'upload', type: 'file', multiple: true, class: 'sr-only' });
  const uploadLabel = h('label', { for: 'upload', class: 'button' }, 'Upload to this directory');
  const folder = h('input', { id: 'new-folder', name: 'folder', autocomplete: 'off', required: true, placeholder: 'name', size: 12 });
  const mk = h('form', { 'aria-label': 'New folder' }, h('label', { for: 'new-folder' }, 'New folder'), folder, h('button', { type: 'submit' }, 'Create folder'));
  mk.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(err);
    try { await s.api.mkdir(id, joinPath(dir, folder.value.trim())); announce(`Created ${folder.value}`); folder.value = ''; void open(dir); } catch (ex) { err.appendChild(errorBox(ex)); }
  });
  // The upload input is visually hidden: show its focus on its label.
  upload.addEventListener('focus', () => uploadLabel.classList.add('focus'));
  upload.addEventListener('blur', () => uploadLabel.classList.remove('focus'));
  const crumbs = h('nav', { class: 'crumbs path', 'aria-label': 'Directory path' });
  const list = h('tbody', {});
  const editor = h('div', { id: 'editor' });
  const drop = h('div', { class: 'dropzone', id: 'dropzone' }, 'Drop files here to upload them to this directory');
  const listing = h('div', {}, crumbs,
    h('table', { class: 'list stack', id: 'files' },
      h('caption', { class: 'sr-only' }, 'Files in the directory'),
      h('thead', {}, h('tr', {}, ...['Name', 'Type', 'Size', 'Modified', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))), list),
    drop);
  const layout = h('div', { class: 'files-layout' }, listing, editor);
  panel.append(h('h2', {}, 'Files'),
    h('div', { class: 'toolbar' }, go, up, uploadLabel, upload, mk),
    err, layout);

  const uploadFiles = async (files: File[]) => {
    for (const f of files) {
      try { await s.api.write(id, joinPath(dir, f.name), f); announce(`Uploaded ${f.name}`); } catch (ex) { err.appendChild(errorBox(ex)); }
    }
    void open(dir);
  };
  // Drag and drop anywhere on the panel uploads into the open directory.
  let depth = 0;
  panel.addEventListener('dragenter', (e) => { if (e.dataTransfer?.types.includes('Files')) { e.preventDefault(); depth++; drop.classList.add('over'); } });
  panel.addEventListener('dragover', (e) => { if (e.dataTransfer?.types.includes('Files')) e.preventDefault(); });
  panel.addEventListener('dragleave', () => { if (--depth <= 0) { depth = 0; drop.classList.remove('over'); } });
  panel.addEventListener('drop', (e) => {
    e.preventDefault();
    depth = 0;
    drop.classList.remove('over');
    void uploadFiles([...(e.dataTransfer?.files ?? [])]);
  });

  const renderCrumbs = (p: string) => {
    const parts = p.split('/').filter(Boolean);
    const ol = h('ol', {});
    const step = (label: string, path: string, last: boolean) => {
      if (last) return h('li', { 'aria-current': 'location' }, h('code', {}, label));
      const b = h('button', { type: 'button', class: 'link' }, label);
      b.addEventListener('click', () => void open(path));
      return h('li', {}, b);
    };
    ol.appendChild(step('/', '/', parts.length === 0));
    parts.forEach((name, i) => ol.appendChild(step(name, '/' + parts.slice(0, i + 1).join('/'), i === parts.length - 1)));
    crumbs.replaceChildren(ol);
  };

  const open = async (p: string, fallbacks: string[] = []): Promise<void> => {
    clear(err);
    try {
      const { entries } = await s.api.files(id, p);
      dir = p;
      pathInput.value = p;
      renderCrumbs(p);
      render(entries);
    } catch (ex) {
      // The first directory that exists: the work directory, else home.
      if (fallbacks.length) return open(fallbacks[0], fallbacks.slice(1));
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
        const pv = h('button', { type: 'button', 'aria-label': `Preview ${e.name}` }, 'Preview');
        pv.addEventListener('click', () => void preview(e));
        const dl = h('button', { type: 'button', 'aria-label': `Download ${e.name}` }, 'Download');
        dl.addEventListener('click', () => void download(e));
        const ed = h('button', { type: 'button', 'aria-label': `Edit ${e.name}` }, 'Edit');
        ed.addEventListener('click', () => void edit(e.path));
        acts.push(pv, ed, dl);
      }
      const del = h('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${e.name}` }, 'Delete');
      del.addEventListener('click', async () => {
        if (!(await confirmDialog(`Delete ${e.name}?`, `${e.path} is removed from the sandbox${e.type === 'dir' ? ' with everything in it' : ''}.`, 'Delete'))) return;
        try { await s.api.remove(id, e.path); announce(`Deleted ${e.name}`); void open(dir); } catch (ex) { err.appendChild(errorBox(ex)); }
      });
      acts.push(del);
      list.appendChild(h('tr', { 'data-name': e.name },
        h('th', { scope: 'row' }, name), h('td', { 'data-label': 'Type' }, e.type), h('td', { 'data-label': 'Size', class: 'num' }, e.type === 'file' ? bytes(e.size) : ''),
        h('td', { 'data-label': 'Modified' }, e.modified_at ? new Date(e.modified_at).toLocaleString() : ''), h('td', { class: 'actions' }, ...acts)));
    }
    if (entries.length === 0) list.appendChild(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'Empty directory: drop files here or upload them')));
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
  const closeButton = () => {
    const close = h('button', { type: 'button' }, 'Close');
    close.addEventListener('click', () => clear(editor));
    return close;
  };
  const preview = async (e: Entry) => {
    clear(editor);
    const body = h('div', {}, loading());
    editor.appendChild(h('section', { class: 'card', id: 'preview', 'aria-labelledby': 'preview-title' },
      h('div', { class: 'row' }, h('h3', { id: 'preview-title' }, 'Preview of ', h('code', {}, e.name)), closeButton()), body));
    if ((e.size ?? 0) > PREVIEW_MAX) { body.replaceChildren(h('p', { class: 'muted' }, `${bytes(e.size)} is too large to preview; download it.`)); return; }
    try {
      const blob = await s.api.read(id, e.path);
      if (IMAGE.test(e.name)) {
        // A data: URL (the console's CSP allows data: images, no blob:).
        const url = await new Promise<string>((res, rej) => { const r = new FileReader(); r.onload = () => res(String(r.result)); r.onerror = () => rej(r.error); r.readAsDataURL(IMAGE.test(e.name) && /\.svg$/i.test(e.name) ? new Blob([blob], { type: 'image/svg+xml' }) : blob); });
        body.replaceChildren(h('img', { class: 'preview', src: url, alt: `The image ${e.name}` }));
        return;
      }
      const buf = new Uint8Array(await blob.arrayBuffer());
      let text: string;
      try { text = new TextDecoder('utf-8', { fatal: true }).decode(buf); } catch {
        body.replaceChildren(h('p', { class: 'muted' }, `A binary file (${bytes(buf.length)}): download it to open it.`));
        return;
      }
      body.replaceChildren(h('pre', { class: 'preview', tabindex: 0, 'aria-label': `Contents of ${e.name}` }, text || '(empty file)'));
    } catch (ex) { body.replaceChildren(errorBox(ex)); }
  };
  const edit = async (p: string) => {
    clear(editor);
    try {
      const text = await (await s.api.read(id, p)).text();
      const area = h('textarea', { id: 'edit-area', rows: 14, spellcheck: 'false' });
      area.value = text;
      const save = h('button', { type: 'submit' }, 'Save');
      const msg = h('span', { class: 'muted', 'aria-live': 'polite', id: 'edit-status' });
      const form = h('form', { class: 'card', 'aria-labelledby': 'edit-title' },
        h('h3', { id: 'edit-title' }, 'Editing ', h('code', {}, p)),
        h('label', { for: 'edit-area', class: 'sr-only' }, `Contents of ${p}`), area,
        h('div', { class: 'row' }, save, closeButton(), msg));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        try { await s.api.write(id, p, area.value); msg.textContent = 'Saved'; void open(dir); } catch (ex) { msg.textContent = String(ex instanceof Error ? ex.toString() : ex); }
      });
      editor.appendChild(form);
      area.focus();
    } catch (ex) { err.appendChild(errorBox(ex)); }
  };
  go.addEventListener('submit', (e) => { e.preventDefault(); void open(pathInput.value.trim() || '/'); });
  up.addEventListener('click', () => void open(parentPath(dir)));
  upload.addEventListener('change', async () => {
    const files = [...(upload.files ?? [])];
    upload.value = '';
    await uploadFiles(files);
  });
  void open(START_DIRS[0], START_DIRS.slice(1));
  return () => {};
}

function logsTab(panel: HTMLElement, s: Session, id: string): () => void {
  const out = h('ol', { class: 'logs', 'aria-label': 'Sandbox log entries' });
  const err = h('div', {});
  panel.append(h('h2', {}, 'Logs'), h('p', { class: 'muted small' }, 'The agent log and lifecycle entries, refreshed every 2 seconds.'), err,
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
      if (logs.length === 0 && !out.firstChild) out.appendChild(h('li', { class: 'muted' }, 'No log entries yet.'));
      clear(err);
    } catch (ex) { clear(err); err.appendChild(errorBox(ex)); }
  };
  void poll();
  const t = window.setInterval(() => void poll(), 2000);
  return () => window.clearInterval(t);
}

/** The sandbox's lifecycle events (GET /v1/events?sandbox=), newest first, live. */
function eventsTab(panel: HTMLElement, s: Session, id: string): () => void {
  const out = h('ol', { class: 'timeline', id: 'timeline', 'aria-label': 'Lifecycle events' });
  const err = h('div', {});
  panel.append(h('h2', {}, 'Events'), h('p', { class: 'muted small' }, 'Every state change of this sandbox with its cause, newest first (refreshed every 3 seconds).'), err, out);
  let after = 0;
  const seen: Event[] = [];
  out.appendChild(h('li', { class: 'loading' }, 'Loading events…'));
  const poll = async () => {
    try {
      for (let i = 0; i < 20; i++) {
        const page = await s.api.events({ sandbox: id, after: String(after), limit: '1000' });
        seen.push(...page.events);
        after = page.next_cursor || after;
        if (!page.has_more) break;
      }
      out.replaceChildren(...[...seen].reverse().map(eventItem));
      if (seen.length === 0) out.replaceChildren(h('li', { class: 'muted' }, 'No events recorded for this sandbox.'));
      clear(err);
    } catch (ex) { clear(err); err.appendChild(errorBox(ex)); }
  };
  void poll();
  const t = window.setInterval(() => void poll(), 3000);
  return () => window.clearInterval(t);
}

export function eventItem(e: Event): HTMLElement {
  return h('li', { class: isFailure(e) ? 'bad' : undefined, 'data-type': e.type },
    h('time', { datetime: e.time }, new Date(e.time).toLocaleString()),
    h('strong', {}, e.type), ' ', h('span', { class: 'muted' }, describeEvent(e)));
}

function resourcesTab(panel: HTMLElement, s: Session, id: string, current: () => Sandbox | null): () => void {
  const charts = h('div', { class: 'charts' }, loading('Loading the metrics history…'));
  const note = h('p', { class: 'muted small' }, 'The sandbox\'s whole life from the metrics history (GET /v1/sandboxes/{id}/metrics), refreshed every 5 seconds.');
  panel.append(h('h2', {}, 'Resources'), note, charts);
  const draw = async () => {
    const sb = current();
    try {
      const { points, resolution_seconds } = await s.api.metrics(id);
      const times = points.map((p) => Date.parse(p.timestamp) + p.span_seconds * 1000);
      const cores = points.map((p) => (p.cpu_used_pct / 100) * p.cpu_count);
      const memLimit = points.length ? points[points.length - 1].memory_limit : sb?.resources?.memory;
      const diskTotal = points.length ? points[points.length - 1].disk_total_bytes : 0;
      const cpus = points.length ? points[points.length - 1].cpu_count : sb?.resources?.cpus ?? 1;
      charts.replaceChildren(
        chart({ title: 'CPU', unit: 'cores', times, series: [{ name: 'used', values: cores }], capacity: { value: cpus, label: `limit ${cpus} cores` }, minMax: 0.1, id: 'chart-cpu' }),
        chart({ title: 'Memory', unit: 'bytes', times, series: [{ name: 'used', values: points.map((p) => p.memory_bytes) }], capacity: memLimit ? { value: memLimit, label: `limit ${bytes(memLimit)}` } : undefined, id: 'chart-memory' }),
        chart({ title: 'Disk', unit: 'bytes', times, series: [{ name: 'used', values: points.map((p) => p.disk_used_bytes) }], capacity: diskTotal ? { value: diskTotal, label: `size ${bytes(diskTotal)}` } : undefined, id: 'chart-disk' }),
        chart({ title: 'Processes', unit: 'count', times, series: [{ name: 'pids', values: points.map((p) => p.pids) }], id: 'chart-pids' }),
        chart({ title: 'Network (since start)', unit: 'bytes', times, series: [{ name: 'sent', values: points.map((p) => p.network_tx_bytes ?? 0) }, { name: 'received', values: points.map((p) => p.network_rx_bytes ?? 0) }], minMax: 1024, id: 'chart-network' }));
      note.textContent = `The sandbox's whole life from the metrics history (a point every ${resolution_seconds} s, older points merged), refreshed every 5 seconds.`;
    } catch (ex) {
      // No history on this server: sample the live stats instead.
      if (sb) await sampleStats(s, [sb]);
      const samples = history.get(id) ?? [];
      const cpu = cpuRates(samples);
      const times = samples.slice(1).map((x) => x.t);
      charts.replaceChildren(errorBox(ex),
        chart({ title: 'CPU', unit: 'cores', times, series: [{ name: 'used', values: cpu }], minMax: 0.1, id: 'chart-cpu' }),
        chart({ title: 'Memory', unit: 'bytes', times: samples.map((x) => x.t), series: [{ name: 'used', values: samples.map((x) => x.memoryBytes) }], id: 'chart-memory' }));
    }
  };
  void draw();
  const t = window.setInterval(() => void draw(), 5000);
  return () => window.clearInterval(t);
}

/** Exec history: the daemon's last commands of this sandbox (GET /v1/sandboxes/{id}/execs), newest first. */
function historyTab(panel: HTMLElement, s: Session, id: string): () => void {
  const area = h('div', {}, loading());
  panel.append(h('h2', {}, 'Exec history'),
    h('p', { class: 'muted small' }, 'The last 100 commands run through the exec API (native, tools, MCP, Daytona), newest first, refreshed every 5 seconds. Terminal sessions, code runs and E2B commands are not in it.'), area);
  const load = async () => {
    try {
      const { execs } = await s.api.execHistory(id);
      area.replaceChildren(table('exec-history', 'Commands run in the sandbox', ['When', 'Command', 'Exit', 'Duration', 'Who'],
        execs.map((e) => [
          new Date(e.time).toLocaleString(),
          h('code', { title: e.truncated ? 'cut at 512 bytes' : undefined }, e.cmd + (e.truncated ? '…' : '')),
          h('span', { class: `state ${e.exit_code === 0 ? 'ok' : 'error'}`, title: e.error ?? e.status ?? undefined },
            e.error ? 'did not finish' : e.timed_out ? `${e.exit_code} (timed out)` : e.oom_killed ? `${e.exit_code} (out of memory)` : String(e.exit_code)),
          runTime(e.duration_ms), e.user || '—']),
        'No command has been run in this sandbox through the API yet.', { right: [2, 3] }));
    } catch (ex) { area.replaceChildren(errorBox(ex)); }
  };
  void load();
  const t = window.setInterval(() => void load(), 5000);
  return () => window.clearInterval(t);
}

/**
 * The desktop of desktop and browser sandboxes: the noVNC page of a signed
 * link embedded in the tab (the page lets only the daemon's own origin
 * frame it), and the same link to open in a tab of its own. The frame
 * loads the link's path, so it is on the console's origin whatever host
 * name the link was minted for.
 */
function desktopTab(panel: HTMLElement, s: Session, id: string): void {
  const note = h('div', { 'aria-live': 'polite' });
  const stage = h('div', { class: 'desktop-stage' });
  const make = (mode: 'view' | 'interactive', label: string) => {
    const b = h('button', { type: 'button', 'data-mode': mode }, label);
    b.addEventListener('click', async () => {
      try {
        const l = await s.api.desktopLink(id, mode);
        const what = mode === 'view' ? 'watch only' : 'interactive';
        const frame = h('iframe', { id: 'desktop-frame', src: l.path, title: `Desktop of sandbox ${id} (${what})`,
          referrerpolicy: 'no-referrer', allow: 'clipboard-read; clipboard-write', 'data-mode': mode });
        stage.replaceChildren(frame);
        note.replaceChildren(h('p', { class: 'muted small' }, `${what[0].toUpperCase()}${what.slice(1)} · a signed link, good until ${new Date(l.expires_at).toLocaleTimeString()} · `,
          h('a', { href: l.url ?? l.path, target: '_blank', rel: 'noopener noreferrer', id: `desktop-${mode}` }, 'open in a new tab')));
        if (mode === 'interactive') frame.focus();
      } catch (ex) {
        stage.replaceChildren();
        note.replaceChildren((ex as { status?: number }).status === 409
          ? h('p', { class: 'empty' }, 'This sandbox has no desktop: sandboxes of the desktop and browser templates have one (docs/desktop.md).')
          : errorBox(ex));
      }
    });
    return b;
  };
  panel.append(h('h2', {}, 'Desktop'),
    h('p', { class: 'muted small' }, 'The sandbox\'s screen in noVNC: watching drops every input, controlling takes the keyboard and mouse (click the screen first).'),
    h('div', { class: 'row' }, make('view', 'Watch'), make('interactive', 'Control')), note, stage);
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

/**
 * Snapshot (a template of the sandbox's files, named in a dialog) and fork
 * (a new sandbox from a live copy of its disk, opened at once).
 */
function copyActions(s: Session, sb: Sandbox, err: HTMLElement): HTMLElement[] {
  if (sb.state !== 'running' && sb.state !== 'paused') return [];
  const snap = h('button', { type: 'button', 'data-key': `snapshot-${sb.id}` }, 'Snapshot');
  snap.addEventListener('click', async () => {
    const name = await promptDialog('Snapshot this sandbox', 'The new template\'s name (NAME or NAME:TAG). Files in /workspace and /tmp are not part of it.', `snap-${sb.id.slice(0, 8)}`, 'Take snapshot');
    if (!name) return;
    clear(err);
    snap.disabled = true;
    try {
      const t = await s.api.snapshot(sb.id, name);
      announce(`Snapshot ${t.name} taken`);
      err.replaceChildren(h('p', { class: 'ok', id: 'snapshot-done' }, 'Snapshot ', h('a', { href: '#/snapshots' }, h('code', {}, t.tag && t.tag !== 'latest' ? `${t.name}:${t.tag}` : t.name)), ' taken.'));
    } catch (ex) { err.appendChild(errorBox(ex)); } finally { snap.disabled = false; }
  });
  const fork = h('button', { type: 'button', 'data-key': `fork-${sb.id}` }, 'Fork');
  fork.addEventListener('click', async () => {
    if (!(await confirmDialog(`Fork ${sb.id}?`, 'A new sandbox starts from a copy of this one\'s disk (processes and memory are not copied); this one keeps running.', 'Fork'))) return;
    clear(err);
    fork.disabled = true;
    try {
      const { sandboxes } = await s.api.fork(sb.id, 1);
      announce(`Forked into ${sandboxes[0].id}`);
      location.hash = `#/sandboxes/${encodeURIComponent(sandboxes[0].id)}`;
    } catch (ex) { err.appendChild(errorBox(ex)); } finally { fork.disabled = false; }
  });
  return sb.state === 'running' ? [snap, fork] : [snap];
}

/** A modal dialog asking for one line of text; null when cancelled. */
function promptDialog(title: string, body: string, value: string, confirmLabel: string): Promise<string | null> {
  return new Promise((resolve) => {
    const input = h('input', { id: 'prompt-input', name: 'value', autocomplete: 'off', required: true, value });
    const cancel = h('button', { type: 'button' }, 'Cancel');
    const form = h('form', { method: 'dialog' },
      h('h2', { id: 'prompt-title' }, title), h('p', { id: 'prompt-body' }, body),
      h('label', { for: 'prompt-input' }, 'Name'), input,
      h('div', { class: 'row' }, h('button', { type: 'submit', class: 'primary' }, confirmLabel), cancel));
    const dlg = h('dialog', { 'aria-labelledby': 'prompt-title', 'aria-describedby': 'prompt-body' }, form);
    let answer: string | null = null;
    form.addEventListener('submit', (e) => { e.preventDefault(); answer = input.value.trim() || null; dlg.close(); });
    cancel.addEventListener('click', () => dlg.close());
    dlg.addEventListener('close', () => { dlg.remove(); resolve(answer); });
    document.body.appendChild(dlg);
    dlg.showModal();
    input.select();
  });
}
