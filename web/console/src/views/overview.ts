import { h, errorBox } from '../dom';
import { bytes } from '../format';
import { formatValue, perMinute } from '../chartmath';
import type { OverviewSeries, PoolStats } from '../api';
import type { Session } from '../session';
import { chart, stat, loading, pageHead, segmented, table } from './common';

const RANGES = ['1h', '24h', '7d'];
const REFRESH_MS = 10_000;
/** The range last picked, while the tab is open (storage holds the key only). */
let lastRange = '1h';

/** The overview: sandboxes now and over time, creates and failures, CPU and memory against the host, pools, tenants. */
export function overviewView(main: HTMLElement, s: Session): () => void {
  let range = lastRange;
  const area = h('div', {}, loading('Loading the overview…'));
  main.append(pageHead('Overview', h('span', { class: 'muted small', id: 'overview-scope' }, s.operator ? 'every tenant' : `${s.info.user}'s sandboxes`),
    segmented('Time range', RANGES, range, (v) => { range = lastRange = v; void load(); })), area);
  let stopped = false;
  let timer = 0;
  const load = async () => {
    window.clearTimeout(timer);
    try {
      const [o, pools] = await Promise.all([s.api.series(range), s.operator ? s.api.pools().then((p) => p.pools).catch(() => null) : Promise.resolve(null)]);
      if (stopped) return;
      render(o, pools);
    } catch (ex) {
      if (!stopped) area.replaceChildren(errorBox(ex));
    }
    if (!stopped) timer = window.setTimeout(() => void load(), REFRESH_MS);
  };
  const render = (o: OverviewSeries, pools: PoolStats[] | null) => {
    const times = o.buckets.map((b) => Date.parse(b.time) + o.step_seconds * 1000);
    const n = o.now;
    const creates = o.buckets.reduce((a, b) => a + b.creates, 0), fails = o.buckets.reduce((a, b) => a + b.failures, 0);
    const cap = o.capacity;
    const cards = h('div', { class: 'cards', id: 'overview-stats' },
      stat('Running', String(n.running), `${n.paused} paused · ${n.stopped} stopped`),
      stat('Sandboxes', String(n.total), 'in all, now'),
      stat(`Creates (${o.range})`, String(creates), `${fails} failure${fails === 1 ? '' : 's'}`),
      stat('CPU in use', formatValue(n.cpu_cores, 'cores'), `of ${cap.cpus} host cores`, cap.cpus ? n.cpu_cores / cap.cpus : undefined),
      stat('Memory in use', bytes(n.memory_bytes), `of ${bytes(cap.memory_bytes)} on the host`, cap.memory_bytes ? n.memory_bytes / cap.memory_bytes : undefined));
    const stepMin = o.step_seconds / 60;
    const charts = h('div', { class: 'charts' },
      chart({ title: 'Sandboxes', unit: 'count', times, id: 'chart-sandboxes', minMax: 4,
        series: [{ name: 'total', values: o.buckets.map((b) => b.total) }, { name: 'running', values: o.buckets.map((b) => b.running) }, { name: 'paused', values: o.buckets.map((b) => b.paused) }] }),
      chart({ title: 'Creates and failures', unit: 'per_min', times, id: 'chart-creates', minMax: 1 / stepMin,
        series: [{ name: 'creates', values: o.buckets.map((b) => perMinute(b.creates, o.step_seconds)) }, { name: 'failures', values: o.buckets.map((b) => perMinute(b.failures, o.step_seconds)) }] }),
      chart({ title: 'CPU in use', unit: 'cores', times, id: 'chart-cpu', minMax: 0.5,
        series: [{ name: 'sandboxes', values: o.buckets.map((b) => b.cpu_cores) }], capacity: { value: cap.cpus, label: `host ${cap.cpus} cores` } }),
      chart({ title: 'Memory in use', unit: 'bytes', times, id: 'chart-memory', minMax: 256 << 20,
        series: [{ name: 'sandboxes', values: o.buckets.map((b) => b.memory_bytes) }], capacity: cap.memory_bytes ? { value: cap.memory_bytes, label: `host ${bytes(cap.memory_bytes)}` } : undefined }));
    const parts: Node[] = [cards, charts];
    if (o.partial) parts.unshift(h('p', { class: 'muted small' }, 'The event log is longer than one overview reads: the oldest points may undercount.'));
    parts.push(h('p', { class: 'muted small' }, `Buckets of ${stepMin >= 60 ? `${stepMin / 60} h` : `${stepMin} min`}. CPU and memory cover the sandboxes that exist now (a sandbox's history goes with it); counts come from the event log.`));
    if (pools) {
      parts.push(h('section', { class: 'card', 'aria-labelledby': 'ov-pools' }, h('h2', { id: 'ov-pools' }, 'Warm pools'),
        table('overview-pools', 'Warm pools', ['Template', 'Ready', 'Hit rate', 'Hits', 'Misses', 'Avg refill'],
          pools.map((p) => {
            const takes = p.hits + p.misses;
            return [p.template, `${p.ready} / ${p.size}`, takes ? `${((100 * p.hits) / takes).toFixed(0)}%` : '—', p.hits, p.misses, p.fills ? `${p.avg_fill_ms.toFixed(0)} ms` : '—'];
          }), 'This server keeps no warm pool.', { right: [2, 3, 4, 5] })));
    }
    if (o.tenants) {
      parts.push(h('section', { class: 'card', 'aria-labelledby': 'ov-tenants' }, h('h2', { id: 'ov-tenants' }, 'Usage per tenant'),
        table('overview-tenants', 'Usage per tenant', ['Tenant', 'Sandboxes', 'Running', `Creates (${o.range})`, 'Failures', 'CPU now', 'Memory now', 'Memory limits'],
          o.tenants.map((t) => [t.user, t.sandboxes, t.running, t.creates, t.failures, formatValue(t.cpu_cores, 'cores'), bytes(t.memory_bytes), bytes(t.memory_limit_bytes)]),
          'No tenant has sandboxes or events in this range.', { right: [1, 2, 3, 4, 5, 6, 7] })));
    }
    area.replaceChildren(...parts);
  };
  void load();
  return () => { stopped = true; window.clearTimeout(timer); };
}
