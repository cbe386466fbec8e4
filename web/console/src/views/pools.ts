import { h, errorBox } from '../dom';
import type { Session } from '../session';
import { pageHead, empty } from './common';

export function poolsView(main: HTMLElement, s: Session): () => void {
  main.appendChild(pageHead('Warm pools'));
  const levels = Object.entries(s.info.pools ?? {});
  if (!s.operator) {
    main.append(h('p', {}, 'Ready sandboxes per pool (hit rates and refill times are for the operator):'),
      levels.length ? h('ul', { class: 'chips' }, ...levels.map(([t, n]) => h('li', { class: 'chip' }, h('b', {}, t), `${n} ready`))) : empty('This server keeps no warm pool.'));
    return () => {};
  }
  const body = h('tbody', {});
  const err = h('div', {});
  main.append(err, h('div', { class: 'card' }, h('table', { class: 'list stack', id: 'pools' },
    h('caption', { class: 'sr-only' }, 'Warm pools'),
    h('thead', {}, h('tr', {}, ...['Template', 'Ready / size', 'Filling', 'Hit rate', 'Hits', 'Misses', 'Avg refill', 'Last refill', 'Refill errors'].map((c) => h('th', { scope: 'col' }, c)))), body)));
  const load = async () => {
    try {
      const { pools } = await s.api.pools();
      body.replaceChildren();
      for (const p of pools) {
        const takes = p.hits + p.misses;
        const td = (label: string, v: string) => h('td', { 'data-label': label, class: 'num' }, v);
        body.appendChild(h('tr', {}, h('th', { scope: 'row' }, p.template), td('Ready / size', `${p.ready} / ${p.size}`), td('Filling', String(p.filling)),
          td('Hit rate', takes ? `${((100 * p.hits) / takes).toFixed(0)}%` : '—'), td('Hits', String(p.hits)), td('Misses', String(p.misses)),
          td('Avg refill', p.fills ? `${p.avg_fill_ms.toFixed(0)} ms` : '—'), td('Last refill', p.fills ? `${p.last_fill_ms.toFixed(0)} ms` : '—'), td('Refill errors', String(p.fill_errors))));
      }
      if (pools.length === 0) body.appendChild(h('tr', {}, h('td', { colspan: 9 }, 'This server keeps no warm pool (POOL_SIZE, POOL_TYPES).')));
      err.replaceChildren();
    } catch (ex) { err.replaceChildren(errorBox(ex)); }
  };
  void load();
  const t = window.setInterval(() => void load(), 5000);
  return () => window.clearInterval(t);
}
