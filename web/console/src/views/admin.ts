import { h, errorBox } from '../dom';
import { bytes, duration } from '../format';
import type { Session } from '../session';

export function adminView(main: HTMLElement, s: Session): () => void {
  main.appendChild(h('h1', {}, 'Admin'));
  const area = h('div', {});
  main.appendChild(area);
  const load = async () => {
    try {
      const o = await s.api.overview();
      const ov = o.overview;
      const q = ov.quotas;
      const dl = (pairs: [string, string][]) => h('dl', { class: 'details' }, ...pairs.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
      const cap = (n: number) => (n ? String(n) : 'no cap');
      const table = (id: string, caption: string, cols: string[], rows: (string | number)[][]) => h('div', { class: 'scroll' }, h('table', { class: 'list', id },
        h('caption', {}, caption), h('thead', {}, h('tr', {}, ...cols.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, ...(rows.length ? rows.map((r) => h('tr', {}, ...r.map((c, i) => (i === 0 ? h('th', { scope: 'row' }, String(c)) : h('td', {}, String(c)))))) : [h('tr', {}, h('td', { colspan: cols.length }, 'None'))]))));
      const now = Date.now();
      area.replaceChildren(
        h('section', { 'aria-labelledby': 'health-h' }, h('h2', { id: 'health-h' }, 'Daemon health'),
          dl([['Status', o.ready ? 'ready' : 'starting'], ['Version', o.version], ['Backend', o.backend], ['Up for', duration(o.uptime_seconds * 1000)],
            ['Live sandboxes', `${ov.live} (${ov.pooled} pooled)`]])),
        h('section', { 'aria-labelledby': 'tenants-h' }, h('h2', { id: 'tenants-h' }, 'Tenants'),
          table('tenants', 'Sandboxes per user', ['User', 'Sandboxes', 'Running', 'Memory limits', 'CPUs'],
            ov.tenants.map((t: any) => [t.user, t.sandboxes, t.running, bytes(t.memory_bytes), t.cpus]))),
        h('section', { 'aria-labelledby': 'quotas-h' }, h('h2', { id: 'quotas-h' }, 'Quotas'),
          dl([['Sandboxes on the server', cap(q.max_sandboxes)], ['Sandboxes per user', cap(q.max_sandboxes_per_user)],
            ['Heavy requests per user', cap(q.max_requests_per_user)], ['Default timeout', duration(q.default_timeout * 1000)],
            ['Longest timeout', duration(q.max_timeout * 1000)],
            ['Default memory', bytes(q.default_resources?.memory_bytes)], ['Most memory', bytes(q.max_resources?.memory_bytes)],
            ['Default CPUs', String(q.default_resources?.cpus ?? '—')], ['Most CPUs', String(q.max_resources?.cpus ?? '—')]])),
        h('section', { 'aria-labelledby': 'all-h' }, h('h2', { id: 'all-h' }, 'Every sandbox'),
          table('all-sandboxes', 'Sandboxes of every user', ['Sandbox', 'Owner', 'Template', 'State', 'Age', 'Time left'],
            ov.sandboxes.map((x: any) => [x.id, x.owner, x.template, x.state, duration(now - Date.parse(x.created_at)), duration(Date.parse(x.end_at) - now)]))),
        h('section', { 'aria-labelledby': 'metrics-h' }, h('h2', { id: 'metrics-h' }, 'Metrics'),
          table('metrics', 'The daemon\'s counters (the full set is at /metrics with METRICS_TOKEN)', ['Metric', 'Value'],
            Object.entries(o.metrics as Record<string, number>).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => [k, Number.isInteger(v) ? v : v.toFixed(3)]))));
    } catch (ex) { area.replaceChildren(errorBox(ex)); }
  };
  void load();
  const t = window.setInterval(() => void load(), 5000);
  return () => window.clearInterval(t);
}
