import { h, announce, confirmDialog, errorBox, clear } from '../dom';
import type { Template } from '../api';
import type { Session } from '../session';
import { bytes } from '../format';
import { loading, empty, pageHead, table } from './common';

/** The sandbox a snapshot was taken of, from its template's source ("snapshot of <id>"). */
export function snapshotOf(t: Template): string | null {
  const m = /^snapshot of (\S+)$/.exec(t.source ?? '');
  return m ? m[1] : null;
}

/**
 * Snapshots: the templates made from a sandbox's files (POST
 * /v1/sandboxes/{id}/snapshot), each startable as a new sandbox.
 */
export function snapshotsView(main: HTMLElement, s: Session): () => void {
  const err = h('div', { 'aria-live': 'assertive' });
  const listBox = h('div', {}, loading('Loading snapshots…'));
  main.append(pageHead('Snapshots'),
    h('p', { class: 'muted small' }, 'A snapshot is a template: the sandbox\'s template plus one layer with what it changed in its root filesystem. Take one from a sandbox\'s page; its size counts against your storage quota.'),
    err, listBox);
  let stopped = false;
  const load = async () => {
    try {
      const { templates } = await s.api.templates();
      if (!stopped) render(templates.filter((t) => snapshotOf(t) !== null));
    } catch (ex) { listBox.replaceChildren(errorBox(ex)); }
  };
  const render = (list: Template[]) => {
    if (list.length === 0) { listBox.replaceChildren(empty('No snapshots yet.', 'Open a running sandbox and use “Snapshot”.')); return; }
    listBox.replaceChildren(table('snapshots', 'Your snapshots', ['Snapshot', 'Of sandbox', 'Size', 'In use', 'Created', 'Actions'], list.map((t) => {
      const ref = t.tag && t.tag !== 'latest' ? `${t.name}:${t.tag}` : t.name;
      const src = snapshotOf(t)!;
      const start = h('button', { type: 'button', 'aria-label': `Start a sandbox from ${ref}` }, 'Start sandbox');
      start.addEventListener('click', async () => {
        clear(err);
        try { const sb = await s.api.create({ template: ref }); announce(`Started ${sb.id}`); location.hash = `#/sandboxes/${encodeURIComponent(sb.id)}`; } catch (ex) { err.appendChild(errorBox(ex)); }
      });
      const del = h('button', { type: 'button', class: 'danger', 'aria-label': `Delete snapshot ${ref}` }, 'Delete');
      del.addEventListener('click', async () => {
        if (!(await confirmDialog(`Delete snapshot ${ref}?`, 'The template and its layer are removed (sandboxes running from it keep going).', 'Delete'))) return;
        try { await s.api.deleteTemplate(ref); announce(`Deleted snapshot ${ref}`); void load(); } catch (ex) { err.appendChild(errorBox(ex)); }
      });
      return [h('strong', {}, ref), h('a', { href: `#/sandboxes/${encodeURIComponent(src)}` }, h('code', {}, src)), bytes(t.layers[t.layers.length - 1]?.size ?? t.size),
        String(t.in_use), new Date(t.created).toLocaleString(), h('span', { class: 'row' }, start, del)];
    }), 'No snapshots.', { right: [2, 3] }));
  };
  void load();
  return () => { stopped = true; };
}
