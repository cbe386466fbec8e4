// Pure helpers of the charts: scales, ticks, units and labels.

export type Unit = 'cores' | 'bytes' | 'count' | 'per_min' | 'ms' | 'percent';

/** A "nice" axis top and its ticks from 0: steps of 1, 2, 2.5 or 5 × 10^k. */
export function niceTicks(max: number, count = 4): number[] {
  if (!Number.isFinite(max) || max <= 0) max = 1;
  const raw = max / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const n = Math.ceil(max / step - 1e-9);
  return Array.from({ length: n + 1 }, (_, i) => round(i * step));
}

/** Byte ticks use binary multiples: a nice step in the unit the top falls in. */
export function byteScale(max: number): { div: number; unit: string } {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (max >= 1024 && i < units.length - 1) { max /= 1024; i++; }
  return { div: Math.pow(1024, i), unit: units[i] };
}

/** The axis' unit label and how tick values are divided for it. */
export function axisUnit(unit: Unit, max: number): { div: number; label: string } {
  switch (unit) {
    case 'bytes': { const b = byteScale(max); return { div: b.div, label: b.unit }; }
    case 'cores': return { div: 1, label: 'cores' };
    case 'per_min': return { div: 1, label: 'per min' };
    case 'ms': return { div: 1, label: 'ms' };
    case 'percent': return { div: 1, label: '%' };
    default: return { div: 1, label: 'count' };
  }
}

/** A value with its unit, as tooltips and captions show it. */
export function formatValue(v: number | null | undefined, unit: Unit): string {
  if (v == null || !Number.isFinite(v)) return '—';
  switch (unit) {
    case 'bytes': {
      const b = byteScale(Math.abs(v));
      return b.div === 1 ? `${Math.round(v)} B` : `${(v / b.div).toFixed(1)} ${b.unit}`;
    }
    case 'cores': return `${v < 10 ? v.toFixed(2) : v.toFixed(1)} cores`;
    case 'per_min': return `${v < 10 ? round(v) : Math.round(v)}/min`;
    case 'ms': return `${Math.round(v)} ms`;
    case 'percent': return `${v.toFixed(0)}%`;
    default: return String(Number.isInteger(v) ? v : round(v));
  }
}

/** Tick label of a value already divided for its axis. */
export function tickLabel(v: number): string {
  return Number.isInteger(v) ? String(v) : String(round(v));
}

/** About count time ticks between t0 and t1 (ms), at round steps. */
export function timeTicks(t0: number, t1: number, count = 5): number[] {
  const span = t1 - t0;
  if (!(span > 0)) return [t0];
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800].map((s) => s * 1000);
  const step = steps.find((s) => span / s <= count) ?? 86400_000 * Math.ceil(span / count / 86400_000);
  const off = new Date(t0).getTimezoneOffset() * 60_000;
  const out: number[] = [];
  for (let t = Math.ceil((t0 - off) / step) * step + off; t <= t1; t += step) out.push(t);
  return out;
}

/** A time label for an axis spanning span ms: seconds, minutes or days. */
export function timeLabel(t: number, span: number): string {
  const d = new Date(t);
  const p = (n: number) => String(n).padStart(2, '0');
  if (span <= 5 * 60_000) return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  if (span <= 36 * 3600_000) return `${p(d.getHours())}:${p(d.getMinutes())}`;
  return `${d.toLocaleString('en', { month: 'short' })} ${d.getDate()} ${p(d.getHours())}h`;
}

/** Index of the sample nearest to x in [0, width] of n evenly spread samples. */
export function nearestIndex(x: number, width: number, n: number): number {
  if (n <= 1) return 0;
  return Math.max(0, Math.min(n - 1, Math.round((x / width) * (n - 1))));
}

function round(n: number): number { return Math.round(n * 10000) / 10000; }
/** A bucket's count as a rate per minute. */
export function perMinute(count: number, stepSeconds: number): number {
  return stepSeconds > 0 ? (count * 60) / stepSeconds : 0;
}
