import { h, clear, announce, confirmDialog, errorBox } from '../dom';
import type { Webhook, Delivery } from '../api';
import type { Session } from '../session';
import { loading, empty, pageHead, table } from './common';

const TYPES = ['created', 'started', 'paused', 'resumed', 'stopped', 'killed', 'expired', 'lost', 'recovered', 'updated', 'snapshotted', 'process_killed', 'forked', 'volume_created', 'volume_deleted', 'template_built', 'template_build_failed', 'template_deleted'];

/** The caller's webhooks (GET/POST/PATCH/DELETE /v1/webhooks) and each one's deliveries. */
export function webhooksView(main: HTMLElement, s: Session): () => void {
  const err = h('div', { 'aria-live': 'assertive' });
  const listBox = h('div', {}, loading('Loading webhooks…'));
  const detail = h('div', { id: 'webhook-detail' });
  const create = h('details', { class: 'create' }, h('summary', { class: 'button primary', role: 'button' }, '+ New webhook'), createForm());
  main.append(pageHead('Webhooks', create), h('p', { class: 'muted small' }, 'Each event of your sandboxes is POSTed to your URL, signed (docs/events.md says how to verify it). Failed deliveries are retried with backoff up to WEBHOOK_MAX_ATTEMPTS.'), err, listBox, detail);
  let open = '';
  let timer = 0;
  let stopped = false;

  function createForm(): HTMLElement {
    const url = h('input', { id: 'wh-url', name: 'url', type: 'url', required: true, placeholder: 'https://hooks.example.com/agentbox', size: 40 });
    const name = h('input', { id: 'wh-name', name: 'name', autocomplete: 'off' });
    const types = h('fieldset', { class: 'row' }, h('legend', { class: 'small' }, 'Event types (none ticked: every type)'),
      ...TYPES.map((t) => h('label', { class: 'small' }, h('input', { type: 'checkbox', name: 'events', value: t }), ` ${t}`)));
    const secretOut = h('div', { 'aria-live': 'polite' });
    const form = h('form', { class: 'card', 'aria-labelledby': 'wh-create-title' },
      h('h2', { id: 'wh-create-title' }, 'New webhook'),
      h('div', { class: 'grid' }, h('label', { for: 'wh-url' }, 'URL'), url, h('label', { for: 'wh-name' }, 'Name'), name),
      types, h('button', { type: 'submit' }, 'Create webhook'), secretOut);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      clear(err); clear(secretOut);
      try {
        const events = [...types.querySelectorAll<HTMLInputElement>('input:checked')].map((i) => i.value);
        const w = await s.api.createWebhook({ url: url.value.trim(), name: name.value.trim() || undefined, events });
        secretOut.append(h('p', { class: 'card', id: 'wh-secret' }, 'Created. Its signing secret, shown only now: ', h('code', {}, w.secret ?? '')));
        announce(`Created webhook ${w.id}`);
        void load();
      } catch (ex) { err.appendChild(errorBox(ex)); }
    });
    return form;
  }

  const load = async () => {
    window.clearTimeout(timer);
    try {
      const { webhooks } = await s.api.webhooks();
      if (stopped) return;
      renderList(webhooks);
      if (open) await showDeliveries(webhooks.find((w) => w.id === open));
    } catch (ex) { clear(err); err.appendChild(errorBox(ex)); }
    if (!stopped) timer = window.setTimeout(() => void load(), 5000);
  };
  const renderList = (list: Webhook[]) => {
    if (list.length === 0) { listBox.replaceChildren(empty('No webhooks yet.', 'Register a URL with “+ New webhook” to receive your sandboxes\' events.')); return; }
    listBox.replaceChildren(table('webhooks', 'Your webhooks', ['Webhook', 'URL', 'Events', 'State', 'Actions'], list.map((w) => {
      const show = h('button', { type: 'button', 'aria-label': `Deliveries of ${w.name || w.id}` }, 'Deliveries');
      show.addEventListener('click', () => { open = w.id; void showDeliveries(w); });
      const toggle = h('button', { type: 'button', 'aria-label': `${w.enabled ? 'Disable' : 'Enable'} ${w.name || w.id}` }, w.enabled ? 'Disable' : 'Enable');
      toggle.addEventListener('click', async () => {
        try { await s.api.updateWebhook(w.id, { enabled: !w.enabled }); void load(); } catch (ex) { err.appendChild(errorBox(ex)); }
      });
      const del = h('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${w.name || w.id}` }, 'Delete');
      del.addEventListener('click', async () => {
        if (!(await confirmDialog(`Delete webhook ${w.name || w.id}?`, 'It receives no more events; deliveries waiting for it are dropped.', 'Delete'))) return;
        try { await s.api.deleteWebhook(w.id); if (open === w.id) { open = ''; clear(detail); } void load(); } catch (ex) { err.appendChild(errorBox(ex)); }
      });
      return [h('span', {}, w.name || h('code', {}, w.id)), h('code', { class: 'small' }, w.url), w.events.length ? w.events.join(', ') : 'every type',
        h('span', { class: `state ${w.enabled ? 'ok' : 'paused'}` }, w.enabled ? 'enabled' : 'disabled'), h('span', { class: 'row' }, show, toggle, del)];
    }), 'No webhooks.'));
  };
  const showDeliveries = async (w?: Webhook) => {
    if (!w) { clear(detail); return; }
    try {
      const { deliveries } = await s.api.deliveries(w.id);
      detail.replaceChildren(h('section', { class: 'card', 'aria-labelledby': 'wh-deliveries' },
        h('h2', { id: 'wh-deliveries' }, 'Deliveries of ', w.name || h('code', {}, w.id)),
        h('p', { class: 'muted small' }, 'The last 100, newest first. Each is retried automatically until it is delivered or runs out of attempts; Resend sends its event again (recorded as a new delivery with the same id).'),
        table('deliveries', 'Deliveries', ['When', 'Event', 'Sandbox', 'Status', 'Attempts', 'Answer', 'Actions'], deliveries.map((d) => [
          new Date(d.time).toLocaleString(), `${d.event_type} #${d.event_id}`, d.sandbox_id ? h('code', {}, d.sandbox_id) : '—',
          h('span', { class: `state ${d.status}` }, d.status), d.attempts, d.status_code ? `HTTP ${d.status_code}${d.error ? ` · ${d.error}` : ''}` : d.error ?? '—',
          resend(w, d, deliveries.length)]),
        'Nothing delivered yet: events go out as they happen.', { right: [4] })));
    } catch (ex) { detail.replaceChildren(errorBox(ex)); }
  };
  /** A delivery's Resend button: queues it again, then shows the list once the new outcome is in (bounded). */
  const resend = (w: Webhook, d: Delivery, shown: number) => {
    const b = h('button', { type: 'button', 'aria-label': `Resend ${d.event_type} #${d.event_id}` }, 'Resend');
    b.addEventListener('click', async () => {
      b.disabled = true;
      try {
        await s.api.redeliver(w.id, d.id);
        announce(`Resending ${d.event_type} #${d.event_id}`);
        for (let i = 0; i < 20 && !stopped; i++) {
          await new Promise((r) => window.setTimeout(r, 500));
          const { deliveries } = await s.api.deliveries(w.id);
          if (deliveries.length > shown || (shown === 100 && deliveries[0]?.time !== d.time)) break;
        }
        void showDeliveries(w);
      } catch (ex) { err.replaceChildren(errorBox(ex)); b.disabled = false; }
    });
    return b;
  };
  void load();
  return () => { stopped = true; window.clearTimeout(timer); };
}
