import { h, errorBox } from '../dom';
import { bytes, duration } from '../format';
import { groupMetrics, type Family } from '../metrics';
import type { Session } from '../session';
import { stat, loading, pageHead, table } from './common';

const BARS = 12;

export function adminView(main: HTMLElement, s: Session): () => void {
  const area = h('div', {}, loading('Loading the server overview…'));
  main.append(pageHead('Admin', h('span', { class: 'muted small' }, 'the whole server, refreshed every 5 s')), area);
  const load = async () => {
    try {
      const o = await s.api.overview();
      const ov = o.overview;
      const q = ov.quotas;
      const dl = (pairs: [string, string][]) => h('dl', { class: 'details' }, ...pairs.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
      const cap = (n: number) => (n ? String(n) : 'no cap');
      const now = Date.now();
      const families = groupMetrics(o.metrics as Record<string, number>);
      area.replaceChildren(
        h('section', { 'aria-labelledby': 'health-h' }, h('h2', { id: 'health-h', class: 'sr-only' }, 'Daemon health'),
          h('div', { class: 'cards', id: 'health' },
            stat('Status', o.ready ? 'ready' : 'starting', `version ${o.version}`),
            stat('Backend', o.backend, `up for ${duration(o.uptime_seconds * 1000)}`),
            stat('Live sandboxes', String(ov.live), `${ov.pooled} waiting in pools`),
            stat('Tenants', String(ov.tenants.length), 'with sandboxes now'))),
        h('div', { class: 'charts' },
          h('section', { class: 'card', 'aria-labelledby': 'tenants-h' }, h('h2', { id: 'tenants-h' }, 'Tenants'),
            table('tenants', 'Sandboxes per user', ['User', 'Sandboxes', 'Running', 'Memory limits', 'CPUs'],
              ov.tenants.map((t: any) => [t.user, t.sandboxes, t.running, bytes(t.memory_bytes), t.cpus]), 'No tenant has sandboxes.', { right: [1, 2, 3, 4] })),
          h('section', { class: 'card', 'aria-labelledby': 'quotas-h' }, h('h2', { id: 'quotas-h' }, 'Quotas'),
            dl([['Sandboxes on the server', cap(q.max_sandboxes)], ['Sandboxes per user', cap(q.max_sandboxes_per_user)],
              ['Heavy requests per user', cap(q.max_requests_per_user)], ['Default timeout', duration(q.default_timeout * 1000)],
              ['Longest timeout', duration(q.max_timeout * 1000)],
              ['Default memory', bytes(q.default_resources?.memory_bytes)], ['Most memory', bytes(q.max_resources?.memory_bytes)],
              ['Default CPUs', String(q.default_resources?.cpus ?? '—')], ['Most CPUs', String(q.max_resources?.cpus ?? '—')]]))),
        h('section', { class: 'card', 'aria-labelledby': 'all-h' }, h('h2', { id: 'all-h' }, 'Every sandbox'),
          table('all-sandboxes', 'Sandboxes of every user', ['Sandbox', 'Owner', 'Template', 'State', 'Age', 'Time left'],
            ov.sandboxes.map((x: any) => [x.id, x.owner, x.template, h('span', { class: `state ${x.state}` }, x.state), duration(now - Date.parse(x.created_at)), duration(Date.parse(x.end_at) - now)]),
            'No sandboxes.')),
        h('section', { 'aria-labelledby': 'metrics-h' }, h('h2', { id: 'metrics-h' }, 'Metrics'),
          h('p', { class: 'muted small' }, 'The daemon\'s own counters, by family (the full set is at /metrics with METRICS_TOKEN). Histograms show how many and the mean.'),
          h('div', { class: 'charts', id: 'metrics' }, ...families.map(familyCard))));
    } catch (ex) { area.replaceChildren(errorBox(ex)); }
  };
  void load();
  const t = window.setInterval(() => void load(), 5000);
  return () => window.clearInterval(t);
}

/** A metric family as a labelled bar chart (its largest label sets). */
function familyCard(f: Family): HTMLElement {
  const top = Math.max(...f.rows.map((r) => r.value), 1);
  const fmt = (v: number) => (Number.isInteger(v) ? v.toLocaleString('en') : v.toFixed(3));
  const mean = (m?: number) => (m == null ? '' : f.unit === 'seconds' ? ` · mean ${(m * 1000).toFixed(1)} ms` : f.unit === 'bytes' ? ` · mean ${bytes(m)}` : ` · mean ${m.toFixed(2)}`);
  const valueText = (v: number) => (f.kind === 'value' && f.unit === 'bytes' ? bytes(v) : fmt(v));
  const rows = f.rows.slice(0, BARS);
  const single = f.rows.length === 1 && !f.rows[0].labels;
  const id = `m-${f.name}`;
  return h('section', { class: 'card', 'aria-labelledby': id, 'data-metric': f.name },
    h('h3', { id }, f.title, ' ', h('code', { class: 'muted small' }, f.name)),
    single
      ? h('p', { class: 'stat' }, h('span', { class: 'value' }, valueText(f.rows[0].value)), h('span', { class: 'sub' }, f.kind === 'histogram' ? ` observations${mean(f.rows[0].mean)}` : ''))
      : h('div', { class: 'bars' }, ...rows.flatMap((r) => {
        const label = r.labels || '(no labels)';
        const text = `${valueText(r.value)}${f.kind === 'histogram' ? mean(r.mean) : ''}`;
        return [h('span', { class: 'name small', title: label }, label),
          h('span', { class: 'bar', 'aria-hidden': 'true' }, h('span', { style: `width:${((100 * r.value) / top).toFixed(1)}%` })),
          h('span', { class: 'num small' }, text)];
      })),
    f.rows.length > BARS ? h('p', { class: 'muted small' }, `and ${f.rows.length - BARS} more label sets`) : null);
}
