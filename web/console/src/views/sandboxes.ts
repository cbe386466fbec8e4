import { h, clear, announce, confirmDialog, errorBox } from '../dom';
import { duration, bytes, parsePairs, metadataQuery, cpuRates, pushBounded, type Sample } from '../format';
import type { Sandbox } from '../api';
import type { Session } from '../session';
import { sparkline, empty } from './common';

const HISTORY = 30;
const COLS = ['Sandbox', 'State', 'Owner', 'Template', 'Age', 'Time left', 'CPU', 'Memory', 'Actions'];
const POLL_MS = 3000;
/** Stats are fetched for at most this many sandboxes per refresh. */
const STATS_MAX = 25;

/** Stats history per sandbox, kept across views while the tab is open. */
export const history = new Map<string, Sample[]>();

export function pauseSupported(s: Session): boolean {
  return s.info.capabilities?.pause === true;
}

export function sandboxesView(main: HTMLElement, s: Session): () => void {
  let timer = 0;
  let stopped = false;
  let filter = '';
  const body = h('tbody', {});
  const err = h('div', { 'aria-live': 'assertive' });
  const filterInput = h('input', { id: 'filter', name: 'filter', placeholder: 'team=ml, run=42', 'aria-describedby': 'filter-help' });
  const filterForm = h('form', { role: 'search', 'aria-label': 'Filter sandboxes by metadata' },
    h('label', { for: 'filter' }, 'Metadata filter'), filterInput,
    h('button', { type: 'submit' }, 'Filter'),
    h('span', { id: 'filter-help', class: 'muted small' }, 'key=value pairs, all must match'));
  filterForm.addEventListener('submit', (e) => {
    e.preventDefault();
    clear(err);
    try {
      filter = metadataQuery(parsePairs(filterInput.value));
      void refresh();
    } catch (ex) {
      err.appendChild(errorBox(ex));
    }
  });

  const table = h('table', { class: 'list stack', 'aria-describedby': 'sandbox-count', id: 'sandboxes' },
    h('caption', { class: 'sr-only' }, 'Your sandboxes'),
    h('thead', {}, h('tr', {},
      ...COLS.map((c) => h('th', { scope: 'col' }, c)))),
    body);
  const emptyBox = h('div', {});
  body.appendChild(h('tr', {}, h('td', { colspan: COLS.length, class: 'loading' }, 'Loading sandboxes…')));

  // The create form folds under the heading's button: no empty space
  // beside the heading, the list in the first view.
  const create = h('details', { class: 'create' },
    h('summary', { class: 'button primary', role: 'button' }, '+ New sandbox'),
    createForm(s, () => { create.open = false; void refresh(); }, err));
  main.append(h('div', { class: 'page-head' }, h('h1', {}, 'Sandboxes'), create),
    h('div', { class: 'toolbar' }, filterForm, h('span', { class: 'muted small', id: 'sandbox-count' })), err, table, emptyBox);

  async function refresh(): Promise<void> {
    window.clearTimeout(timer);
    try {
      const { sandboxes } = await s.api.list(filter);
      if (stopped) return;
      await sampleStats(s, sandboxes.filter((x) => x.state === 'running').slice(0, STATS_MAX));
      if (stopped) return;
      render(sandboxes);
    } catch (ex) {
      if (stopped) return;
      clear(err);
      err.appendChild(errorBox(ex));
    }
    if (!stopped) timer = window.setTimeout(() => void refresh(), POLL_MS);
  }

  function render(list: Sandbox[]): void {
    // Keep the focused control across re-renders (keyboard users).
    const focusedKey = (document.activeElement as HTMLElement | null)?.dataset?.key;
    clear(body);
    main.querySelector('#sandbox-count')!.textContent = `${list.length} sandbox${list.length === 1 ? '' : 'es'}${filter ? ' matching the filter' : ''}`;
    const now = Date.now();
    for (const sb of list) {
      const samples = history.get(sb.id) ?? [];
      const cpu = cpuRates(samples);
      const mem = samples.map((x) => x.memoryBytes);
      const lastCpu = cpu.length ? `${cpu[cpu.length - 1].toFixed(2)} cores` : 'measuring…';
      const lastMem = mem.length ? bytes(mem[mem.length - 1]) : 'measuring…';
      body.appendChild(h('tr', { 'data-id': sb.id },
        h('th', { scope: 'row' }, h('a', { href: `#/sandboxes/${encodeURIComponent(sb.id)}`, 'data-key': `open-${sb.id}` }, h('code', {}, sb.id))),
        h('td', { 'data-label': 'State' }, h('span', { class: `state ${sb.state}` }, sb.state)),
        h('td', { 'data-label': 'Owner' }, s.info.user),
        h('td', { 'data-label': 'Template' }, sb.template),
        h('td', { 'data-label': 'Age', class: 'num' }, duration(now - Date.parse(sb.created_at))),
        h('td', { 'data-label': 'Time left', class: 'num' }, duration(Date.parse(sb.end_at) - now)),
        h('td', { 'data-label': 'CPU' }, sb.state === 'running' ? sparkline(cpu, `CPU of ${sb.id}: ${lastCpu}`, lastCpu, 0.05) : h('span', { class: 'muted' }, '—')),
        h('td', { 'data-label': 'Memory' }, sb.state === 'running' ? sparkline(mem, `Memory of ${sb.id}: ${lastMem}`, lastMem) : h('span', { class: 'muted' }, '—')),
        h('td', { class: 'actions' }, ...actions(s, sb, () => void refresh(), err))));
    }
    clear(emptyBox);
    if (list.length === 0) {
      clear(body);
      emptyBox.appendChild(empty(filter ? 'No sandbox matches the filter.' : 'No sandboxes yet.', filter ? '' : 'Create one with “+ New sandbox”, the CLI (agentbox create) or the API.'));
    }
    if (focusedKey) (body.querySelector(`[data-key="${CSS.escape(focusedKey)}"]`) as HTMLElement | null)?.focus();
  }

  void refresh();
  return () => { stopped = true; window.clearTimeout(timer); };
}

/** Samples stats of running sandboxes into the history. */
export async function sampleStats(s: Session, list: Sandbox[]): Promise<void> {
  await Promise.all(list.map(async (sb) => {
    try {
      const st = await s.api.stats(sb.id);
      const hist = history.get(sb.id) ?? [];
      pushBounded(hist, { t: Date.now(), cpuSeconds: st.cpu_seconds ?? 0, memoryBytes: st.memory_bytes ?? 0 }, HISTORY);
      history.set(sb.id, hist);
    } catch {
      /* gone meanwhile: the next list says so */
    }
  }));
}

/** The action buttons of one sandbox (list and detail page). */
export function actions(s: Session, sb: Sandbox, changed: (action: string) => void, err: HTMLElement): HTMLElement[] {
  const run = (label: string, fn: () => Promise<unknown>, confirmText?: string, key?: string) => {
    const b = h('button', { type: 'button', 'data-key': `${key ?? label}-${sb.id}`, 'aria-label': `${label} ${sb.id}` }, label);
    b.addEventListener('click', async () => {
      if (confirmText && !(await confirmDialog(`${label} ${sb.id}?`, confirmText, label))) return;
      clear(err);
      b.disabled = true;
      try {
        await fn();
        announce(`${label}: ${sb.id} done`);
        changed(label);
      } catch (ex) {
        err.appendChild(errorBox(ex));
      } finally {
        b.disabled = false;
      }
    });
    return b;
  };
  const out = [run('Extend', () => s.api.extend(sb.id, Math.max(300, (Date.parse(sb.end_at) - Date.now()) / 1000 + 300)), undefined, 'extend')];
  if (pauseSupported(s)) {
    if (sb.state === 'paused') out.push(run('Resume', () => s.api.resume(sb.id), undefined, 'resume'));
    else if (sb.state === 'running') out.push(run('Pause', () => s.api.pause(sb.id), 'Its processes are frozen until it is resumed.', 'pause'));
  }
  const kill = run('Kill', () => s.api.kill(sb.id), 'The sandbox and every file in it are destroyed. This cannot be undone.', 'kill');
  kill.classList.add('danger');
  out.push(kill);
  return out;
}

function createForm(s: Session, created: () => void, err: HTMLElement): HTMLElement {
  const names = new Set<string>(['host', ...Object.keys(s.info.templates ?? {})]);
  const select = h('select', { id: 'new-template', name: 'template' });
  const fill = () => {
    clear(select);
    for (const n of [...names].sort()) select.appendChild(h('option', { value: n, selected: n === 'host' }, n));
  };
  fill();
  s.api.templates().then(({ templates }) => {
    for (const t of templates) names.add(t.tag && t.tag !== 'latest' ? `${t.name}:${t.tag}` : t.name);
    fill();
  }).catch(() => { /* no template store: the configured names only */ });
  const timeout = h('input', { id: 'new-timeout', name: 'timeout', type: 'number', min: 1, value: 900, inputmode: 'numeric' });
  const meta = h('input', { id: 'new-metadata', name: 'metadata', placeholder: 'team=ml' });
  const submit = h('button', { type: 'submit' }, 'Create sandbox');
  const form = h('form', { class: 'card', 'aria-labelledby': 'create-title' },
    h('h2', { id: 'create-title' }, 'New sandbox'),
    h('div', { class: 'grid' },
      h('label', { for: 'new-template' }, 'Template'), select,
      h('label', { for: 'new-timeout' }, 'Timeout (seconds)'), timeout,
      h('label', { for: 'new-metadata' }, 'Metadata'), meta),
    submit);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(err);
    submit.disabled = true;
    try {
      const body: Record<string, unknown> = { template: select.value, timeout: Number(timeout.value) };
      const md = parsePairs(meta.value);
      if (Object.keys(md).length) body.metadata = md;
      const sb = await s.api.create(body);
      announce(`Created ${sb.id}`);
      created();
    } catch (ex) {
      err.appendChild(errorBox(ex));
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}
