// The daemon's counters as GET /v1/admin/overview gives them
// ("name{k=v,...}" or "name{...}_count"/"_sum" for histograms), grouped
// into families the Admin page can chart.

export interface MetricRow { labels: string; value: number; count?: number; mean?: number }
export interface Family { name: string; title: string; kind: 'histogram' | 'value'; unit: 'seconds' | 'bytes' | 'count'; rows: MetricRow[]; total: number }

export function parseKey(key: string): { name: string; labels: string; suffix: '' | '_count' | '_sum' } {
  let suffix: '' | '_count' | '_sum' = '';
  let k = key;
  for (const s of ['_count', '_sum'] as const) {
    if (k.endsWith('}' + s) || (!k.includes('{') && k.endsWith(s))) { suffix = s; k = k.slice(0, -s.length); break; }
  }
  const i = k.indexOf('{');
  if (i < 0) return { name: k, labels: '', suffix };
  return { name: k.slice(0, i), labels: k.slice(i + 1, k.endsWith('}') ? -1 : undefined).split(',').join(', '), suffix };
}

export function groupMetrics(m: Record<string, number>): Family[] {
  const fams = new Map<string, Map<string, { value?: number; count?: number; sum?: number }>>();
  for (const [key, v] of Object.entries(m)) {
    const { name, labels, suffix } = parseKey(key);
    if (!fams.has(name)) fams.set(name, new Map());
    const rows = fams.get(name)!;
    const r = rows.get(labels) ?? {};
    if (suffix === '_count') r.count = v; else if (suffix === '_sum') r.sum = v; else r.value = v;
    rows.set(labels, r);
  }
  const out: Family[] = [];
  for (const [name, rows] of fams) {
    const hist = [...rows.values()].some((r) => r.count !== undefined && r.value === undefined);
    const unit = /_seconds$/.test(name) ? 'seconds' : /_bytes$/.test(name) ? 'bytes' : 'count';
    const list: MetricRow[] = [...rows].map(([labels, r]) => hist
      ? { labels, value: r.count ?? 0, count: r.count ?? 0, mean: r.count ? (r.sum ?? 0) / r.count : undefined }
      : { labels, value: r.value ?? 0 });
    list.sort((a, b) => b.value - a.value || a.labels.localeCompare(b.labels));
    out.push({ name, title: title(name), kind: hist ? 'histogram' : 'value', unit, rows: list, total: list.reduce((a, r) => a + r.value, 0) });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

function title(name: string): string {
  const t = name.replace(/^agentbox_/, '').replace(/_(total|seconds|bytes)$/, '').replace(/_/g, ' ');
  return t.charAt(0).toUpperCase() + t.slice(1);
}
