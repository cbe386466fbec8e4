// A tiny element builder: no framework, no innerHTML with data.

type Attrs = Record<string, string | number | boolean | undefined | null | EventListener>;
type Child = Node | string | number | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v as EventListener);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
  }
}

const SVG = 'http://www.w3.org/2000/svg';
export function svg(tag: string, attrs: Record<string, string | number> = {}, ...children: Node[]): SVGElement {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.appendChild(c);
  return el;
}

export function clear(el: Element): void {
  while (el.firstChild) el.removeChild(el.firstChild);
}

/** Announces text to screen readers through the page's status region. */
export function announce(text: string): void {
  const s = document.getElementById('status');
  if (s) s.textContent = text;
}

/** Asks to confirm with a modal dialog; resolves true on the confirm button. */
export function confirmDialog(title: string, body: string, confirmLabel: string): Promise<boolean> {
  return new Promise((resolve) => {
    const ok = h('button', { type: 'button', class: 'danger', 'data-confirm': '' }, confirmLabel);
    const cancel = h('button', { type: 'button' }, 'Cancel');
    const titleId = `dlg-${Math.random().toString(36).slice(2)}`;
    const dlg = h('dialog', { 'aria-labelledby': titleId, role: 'alertdialog' },
      h('h2', { id: titleId }, title), h('p', {}, body), h('div', { class: 'row' }, cancel, ok));
    const done = (v: boolean) => { dlg.close(); dlg.remove(); resolve(v); };
    ok.addEventListener('click', () => done(true));
    cancel.addEventListener('click', () => done(false));
    dlg.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
    document.body.appendChild(dlg);
    dlg.showModal();
    cancel.focus();
  });
}

/** An error box worded as the API words it. */
export function errorBox(err: unknown): HTMLElement {
  return h('p', { class: 'error', role: 'alert' }, String(err instanceof Error ? err.toString() : err));
}
