import { h, svg } from '../dom';
import { sparkPoints } from '../format';
import { niceTicks, axisUnit, formatValue, tickLabel, timeTicks, timeLabel, nearestIndex, type Unit } from '../chartmath';

/** An inline sparkline with an accessible name and its latest value beside it. */
export function sparkline(values: number[], label: string, latest: string, max?: number): HTMLElement {
  const w = 72, hgt = 22;
  const s = svg('svg', { viewBox: `0 0 ${w} ${hgt}`, width: w, height: hgt, class: 'spark', 'aria-hidden': 'true' });
  s.appendChild(svg('line', { x1: 0, y1: hgt - 0.5, x2: w, y2: hgt - 0.5 }));
  if (values.length > 0) s.appendChild(svg('polyline', { points: sparkPoints(values, w, hgt - 3, max), 'stroke-width': 2, transform: 'translate(0,1)' }));
  return h('span', { class: 'cell-metric', title: label }, s, h('span', { 'aria-label': label }, latest));
}

export interface Series { name: string; values: (number | null)[] }

export interface ChartOptions {
  title: string;
  unit: Unit;
  /** Sample times (ms), one per value of every series. */
  times: number[];
  series: Series[];
  /** A dashed line at a limit (host capacity, the sandbox's limit). */
  capacity?: { value: number; label: string };
  /** The axis' top at least this (e.g. 1 core). */
  minMax?: number;
  id?: string;
}

const W = 640, H = 220, ML = 52, MR = 14, MT = 18, MB = 26;

/**
 * A line chart with axes (time along x, the unit's ticks up y, the unit
 * named), a legend, the latest values in its caption, and the values under
 * the pointer (or keyboard: arrow keys) in a tooltip.
 */
export function chart(o: ChartOptions): HTMLElement {
  const vals = o.series.flatMap((s) => s.values.filter((v): v is number => v != null && Number.isFinite(v)));
  // A limit far above the data would flatten it: then the limit is named
  // in the legend but the axis follows the data.
  const peak0 = Math.max(0, ...vals);
  const capInView = !!o.capacity && o.capacity.value > 0 && (vals.length === 0 || o.capacity.value <= 4 * Math.max(peak0, o.minMax ?? 0));
  const top0 = Math.max(o.minMax ?? 0, capInView ? o.capacity!.value : 0, peak0);
  const { div, label: unitLabel } = axisUnit(o.unit, top0);
  const ticks = niceTicks(top0 / div || (o.unit === 'count' ? 4 : 1));
  const top = ticks[ticks.length - 1] * div;
  const pw = W - ML - MR, ph = H - MT - MB;
  const t0 = o.times[0] ?? Date.now(), t1 = o.times[o.times.length - 1] ?? t0;
  const span = Math.max(1, t1 - t0);
  const x = (t: number) => ML + ((t - t0) / span) * pw;
  const y = (v: number) => MT + ph - (Math.max(0, v) / (top || 1)) * ph;

  const latest = o.series.map((s) => `${s.name} ${formatValue(lastOf(s.values), o.unit)}`).join(', ');
  const peak = vals.length ? formatValue(Math.max(...vals), o.unit) : 'no data';
  const label = `${o.title} (${unitLabel}), ${o.times.length ? `${timeLabel(t0, span)} to ${timeLabel(t1, span)}` : 'no samples'}: now ${latest}; highest ${peak}`;
  const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label, 'data-unit': unitLabel });
  const grid = svg('g', { class: 'grid' });
  const yAxis = svg('g', { class: 'axis y', 'data-axis': 'y' });
  for (const tk of ticks) {
    const yy = y(tk * div);
    grid.appendChild(svg('line', { x1: ML, x2: W - MR, y1: yy, y2: yy }));
    yAxis.appendChild(svg('text', { x: ML - 6, y: yy + 4, 'text-anchor': 'end' }, document.createTextNode(tickLabel(tk))));
  }
  const xAxis = svg('g', { class: 'axis x', 'data-axis': 'x' });
  xAxis.appendChild(svg('line', { x1: ML, x2: W - MR, y1: MT + ph, y2: MT + ph }));
  if (o.times.length > 1) {
    for (const tk of timeTicks(t0, t1, 5)) {
      const xx = x(tk);
      xAxis.appendChild(svg('line', { x1: xx, x2: xx, y1: MT + ph, y2: MT + ph + 4 }));
      xAxis.appendChild(svg('text', { x: xx, y: H - 6, 'text-anchor': 'middle' }, document.createTextNode(timeLabel(tk, span))));
    }
  }
  s.append(grid, yAxis, xAxis, svg('text', { x: 4, y: 11, class: 'unit' }, document.createTextNode(unitLabel)));
  if (capInView) {
    const cy = y(o.capacity!.value);
    s.append(svg('line', { x1: ML, x2: W - MR, y1: cy, y2: cy, class: 'cap' }),
      svg('text', { x: W - MR, y: cy - 4, 'text-anchor': 'end', class: 'cap-label' }, document.createTextNode(o.capacity!.label)));
  }
  o.series.forEach((se, i) => {
    const pts: string[] = [];
    se.values.forEach((v, k) => { if (v != null && Number.isFinite(v) && o.times[k] != null) pts.push(`${r1(x(o.times[k]))},${r1(y(v))}`); });
    if (pts.length === 0) return;
    if (pts.length === 1) {
      const [px, py] = pts[0].split(',');
      s.appendChild(svg('circle', { cx: px, cy: py, r: 3, class: `a${i % 4}` }));
      return;
    }
    if (o.series.length === 1) {
      const first = pts[0].split(',')[0], last = pts[pts.length - 1].split(',')[0];
      s.appendChild(svg('polygon', { points: `${first},${MT + ph} ${pts.join(' ')} ${last},${MT + ph}`, class: `area a${i % 4}` }));
    }
    s.appendChild(svg('polyline', { points: pts.join(' '), fill: 'none', 'stroke-width': 2, class: `s${i % 4}`, 'stroke-linejoin': 'round' }));
  });
  const cursor = svg('line', { x1: 0, x2: 0, y1: MT, y2: MT + ph, class: 'cursor', visibility: 'hidden' });
  s.appendChild(cursor);

  const tip = h('div', { class: 'tip', hidden: true, 'aria-hidden': 'true' });
  const legend = h('ul', { class: 'legend' }, ...o.series.map((se, i) => h('li', {}, h('i', { class: `k${i % 4}` }), se.name)),
    o.capacity && o.capacity.value > 0 ? h('li', {}, capInView ? h('i', { class: 'kcap' }) : null, capInView ? o.capacity.label : `${o.capacity.label} (above the scale)`) : null);
  const fig = h('figure', { class: 'chart', id: o.id, 'data-chart': o.title },
    h('figcaption', {}, h('span', {}, o.title, ' ', h('span', { class: 'muted small' }, `(${unitLabel})`)), h('span', { class: 'latest' }, vals.length ? latest : 'no data yet')),
    s, legend, tip);
  if (!vals.length) fig.appendChild(h('p', { class: 'muted small' }, 'No samples in this range yet.'));

  const show = (i: number) => {
    if (!o.times.length) return;
    const xx = x(o.times[i]);
    cursor.setAttribute('x1', String(xx)); cursor.setAttribute('x2', String(xx)); cursor.setAttribute('visibility', 'visible');
    tip.textContent = `${new Date(o.times[i]).toLocaleString()} · ${o.series.map((se) => `${se.name} ${formatValue(se.values[i], o.unit)}`).join(' · ')}`;
    tip.hidden = false;
    const box = s.getBoundingClientRect(), fb = fig.getBoundingClientRect();
    const px = (xx / W) * box.width + (box.left - fb.left);
    tip.style.left = `${Math.max(4, Math.min(px - 60, fb.width - tip.offsetWidth - 4))}px`;
    tip.style.top = `${box.top - fb.top + 4}px`;
  };
  const hide = () => { tip.hidden = true; cursor.setAttribute('visibility', 'hidden'); };
  s.addEventListener('pointermove', (e) => {
    const box = s.getBoundingClientRect();
    const vx = ((e.clientX - box.left) / box.width) * W;
    const frac = Math.max(0, Math.min(1, (vx - ML) / pw));
    const t = t0 + frac * span;
    // Nearest sample by time (samples may be uneven).
    let best = 0;
    for (let k = 1; k < o.times.length; k++) if (Math.abs(o.times[k] - t) < Math.abs(o.times[best] - t)) best = k;
    show(o.times.length > 1 ? best : nearestIndex(0, 1, 1));
  });
  s.addEventListener('pointerleave', hide);
  return fig;
}

function lastOf(v: (number | null)[]): number | null {
  for (let i = v.length - 1; i >= 0; i--) if (v[i] != null) return v[i];
  return null;
}
function r1(n: number): number { return Math.round(n * 10) / 10; }

/** A stat card: a label, a big value, a line under it, an optional meter. */
export function stat(label: string, value: string, sub?: string, fraction?: number): HTMLElement {
  return h('div', { class: 'stat' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value),
    sub ? h('div', { class: 'sub' }, sub) : null,
    fraction != null && Number.isFinite(fraction)
      ? h('div', { class: 'meter', role: 'meter', 'aria-label': `${label} used`, 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': Math.round(fraction * 100) },
        h('span', { style: `width:${Math.min(100, Math.max(0, fraction * 100)).toFixed(1)}%` }))
      : null);
}

export function loading(text = 'Loading…'): HTMLElement {
  return h('p', { class: 'loading', role: 'status' }, text);
}

export function empty(text: string, ...more: (Node | string)[]): HTMLElement {
  return h('div', { class: 'empty' }, h('p', {}, text), ...more);
}

/** A page heading with controls on the right. */
export function pageHead(title: string, ...right: (Node | null)[]): HTMLElement {
  return h('div', { class: 'page-head' }, h('h1', {}, title), h('div', { class: 'row' }, ...right));
}

/**
 * A table that becomes a stack of cards on a narrow screen: each cell
 * carries its column's name (data-label) for that layout.
 */
export function table(id: string, caption: string, cols: string[], rows: (Node | string | number)[][], emptyText: string, opts: { right?: number[]; captionVisible?: boolean } = {}): HTMLElement {
  const right = new Set(opts.right ?? []);
  const body = h('tbody', {}, ...rows.map((r) => h('tr', {}, ...r.map((c, i) => {
    const content = typeof c === 'object' ? c : String(c);
    return i === 0 ? h('th', { scope: 'row' }, content) : h('td', { 'data-label': cols[i], class: right.has(i) ? 'r' : undefined }, content);
  }))));
  if (rows.length === 0) body.appendChild(h('tr', {}, h('td', { colspan: cols.length, class: 'muted' }, emptyText)));
  return h('table', { class: 'list stack', id },
    h('caption', { class: opts.captionVisible ? undefined : 'sr-only' }, caption),
    h('thead', {}, h('tr', {}, ...cols.map((c, i) => h('th', { scope: 'col', class: right.has(i) ? 'r' : undefined }, c)))), body);
}

/** Segmented buttons (aria-pressed), e.g. a chart range. */
export function segmented(label: string, options: string[], current: string, pick: (v: string) => void): HTMLElement {
  const g = h('div', { class: 'seg', role: 'group', 'aria-label': label });
  for (const v of options) {
    const b = h('button', { type: 'button', 'aria-pressed': v === current ? 'true' : 'false' }, v);
    b.addEventListener('click', () => {
      g.querySelectorAll('button').forEach((x) => x.setAttribute('aria-pressed', x === b ? 'true' : 'false'));
      pick(v);
    });
    g.appendChild(b);
  }
  return g;
}
