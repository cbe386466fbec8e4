import { svg } from '../dom';
import { sparkPoints } from '../format';

/** An inline sparkline with an accessible name. */
export function sparkline(values: number[], label: string, max?: number): SVGElement {
  const w = 80, hgt = 20;
  const s = svg('svg', { viewBox: `0 0 ${w} ${hgt}`, width: w, height: hgt, role: 'img', class: 'spark', 'aria-label': label });
  s.appendChild(svg('title', {}, document.createTextNode(label)));
  if (values.length > 0) s.appendChild(svg('polyline', { points: sparkPoints(values, w, hgt, max), fill: 'none', 'stroke-width': 1.5 }));
  return s;
}

/** A larger line chart with a caption and the latest value. */
export function chart(values: number[], caption: string, latest: string, max?: number): HTMLElement {
  const w = 320, hgt = 100;
  const fig = document.createElement('figure');
  fig.className = 'chart';
  const s = svg('svg', { viewBox: `0 0 ${w} ${hgt}`, role: 'img', 'aria-label': `${caption}: ${latest}`, preserveAspectRatio: 'none' });
  s.appendChild(svg('rect', { x: 0, y: 0, width: w, height: hgt, class: 'bg' }));
  if (values.length > 0) s.appendChild(svg('polyline', { points: sparkPoints(values, w, hgt - 4, max), fill: 'none', 'stroke-width': 2, transform: 'translate(0,2)' }));
  const cap = document.createElement('figcaption');
  cap.textContent = `${caption} — ${latest}`;
  fig.append(s, cap);
  return fig;
}
