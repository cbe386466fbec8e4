import { h, clear, errorBox } from '../dom';
import type { Event } from '../api';
import type { Session } from '../session';
import { loading, empty, pageHead } from './common';
import { describeEvent, isFailure } from '../eventtext';

const TYPES = ['created', 'started', 'paused', 'resumed', 'stopped', 'killed', 'expired', 'lost', 'recovered', 'updated', 'snapshotted', 'process_killed', 'forked', 'volume_created', 'volume_deleted', 'template_built', 'template_build_failed', 'template_deleted'];
const POLL_MS = 3000;
const SHOW = 500;

/** Every lifecycle event the caller may read (GET /v1/events), newest first, following new ones. */
export function eventsView(main: HTMLElement, s: Session): () => void {
  const type = h('select', { id: 'ev-type', name: 'type' }, h('option', { value: '' }, 'every type'), ...TYPES.map((t) => h('option', { value: t }, t)));
  const sb = h('input', { id: 'ev-sandbox', name: 'sandbox', placeholder: 'sandbox id', autocomplete: 'off', size: 16 });
  const owner = s.operator ? h('input', { id: 'ev-owner', name: 'owner', placeholder: 'tenant', autocomplete: 'off', size: 10 }) : null;
  const form = h('form', { role: 'search', 'aria-label': 'Filter events' },
    h('label', { for: 'ev-type' }, 'Type'), type, h('label', { for: 'ev-sandbox' }, 'Sandbox'), sb,
    owner ? h('label', { for: 'ev-owner' }, 'Tenant') : null, owner, h('button', { type: 'submit' }, 'Apply'));
  const body = h('tbody', {});
  const err = h('div', {});
  const status = h('span', { class: 'muted small', id: 'events-count', 'aria-live': 'polite' });
  const box = h('div', {}, loading('Loading events…'));
  main.append(pageHead('Events', status), h('div', { class: 'toolbar' }, form), err, box);
  let list: Event[] = [];
  let after = 0;
  let timer = 0;
  let stopped = false;
  let gen = 0;
  const query = () => {
    const q: Record<string, string> = { limit: '1000' };
    if (type.value) q.type = type.value;
    if (sb.value.trim()) q.sandbox = sb.value.trim();
    if (owner?.value.trim()) q.owner = owner.value.trim();
    return q;
  };
  const poll = async () => {
    window.clearTimeout(timer);
    const mine = gen;
    try {
      for (let i = 0; i < 50; i++) {
        const page = await s.api.events({ ...query(), after: String(after) });
        if (mine !== gen || stopped) return;
        list.push(...page.events);
        after = page.next_cursor || after;
        if (!page.has_more) break;
      }
      if (list.length > SHOW) list = list.slice(list.length - SHOW);
      render();
      clear(err);
    } catch (ex) { clear(err); err.appendChild(errorBox(ex)); }
    if (!stopped) timer = window.setTimeout(() => void poll(), POLL_MS);
  };
  const render = () => {
    status.textContent = `${list.length} event${list.length === 1 ? '' : 's'}${list.length >= SHOW ? ' (the latest)' : ''}, live`;
    if (list.length === 0) { box.replaceChildren(empty('No events match.', 'Events appear as sandboxes are created, paused, resumed and killed.')); return; }
    clear(body);
    for (const e of [...list].reverse()) {
      body.appendChild(h('tr', { 'data-event': e.id, class: isFailure(e) ? 'bad' : undefined },
        h('th', { scope: 'row', class: 'num' }, h('time', { datetime: e.time }, new Date(e.time).toLocaleString())),
        h('td', { 'data-label': 'Type' }, h('span', { class: `state ${isFailure(e) ? 'failed' : e.type}` }, e.type)),
        h('td', { 'data-label': 'Sandbox' }, subject(e)),
        h('td', { 'data-label': 'Owner' }, e.owner),
        h('td', { 'data-label': 'Template' }, e.template ?? ''),
        h('td', { 'data-label': 'Why' }, describeEvent(e))));
    }
    if (!box.contains(body)) box.replaceChildren(h('table', { class: 'list stack', id: 'events' }, h('caption', { class: 'sr-only' }, 'Lifecycle events, newest first'),
      h('thead', {}, h('tr', {}, ...['Time', 'Type', 'Sandbox', 'Owner', 'Template', 'Why'].map((c) => h('th', { scope: 'col' }, c)))), body));
  };
  form.addEventListener('submit', (e) => { e.preventDefault(); gen++; list = []; after = 0; box.replaceChildren(loading('Loading events…')); void poll(); });
  void poll();
  return () => { stopped = true; window.clearTimeout(timer); };
}

/** The sandbox an event is about (a link to its events), or the volume or template of one about neither. */
function subject(e: Event): Node {
  if (e.sandbox_id) return h('a', { href: `#/sandboxes/${encodeURIComponent(e.sandbox_id)}/events` }, h('code', {}, e.sandbox_id));
  const d = e.data ?? {};
  if (typeof d.volume === 'string') return h('span', {}, 'volume ', h('code', {}, d.volume));
  const tags = Array.isArray(d.tags) ? d.tags.join(', ') : typeof d.template === 'string' ? d.template : '';
  return h('span', { class: 'muted' }, tags ? `template ${tags}` : '—');
}
