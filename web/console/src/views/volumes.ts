import { h, clear, announce, confirmDialog, errorBox } from '../dom';
import type { Volume } from '../api';
import type { Session } from '../session';
import { bytes } from '../format';
import { loading, empty, pageHead, table } from './common';

/** The caller's volumes (GET/POST/DELETE /v1/volumes): size, use, the sandboxes mounting each. */
export function volumesView(main: HTMLElement, s: Session): () => void {
  const err = h('div', { 'aria-live': 'assertive' });
  const listBox = h('div', {}, loading('Loading volumes…'));
  const create = h('details', { class: 'create' }, h('summary', { class: 'button primary', role: 'button' }, '+ New volume'), createForm());
  const browser = h('div', { id: 'volume-browser' });
  main.append(pageHead('Volumes', create),
    h('p', { class: 'muted small' }, 'Named disks that outlive sandboxes: mount one at create (volumes: [{name, path}]) in any number of sandboxes at once. Their sizes count against your storage quota (docs/volumes.md).'),
    err, listBox, browser);
  let timer = 0;
  let stopped = false;

  function createForm(): HTMLElement {
    const name = h('input', { id: 'vol-name', name: 'name', required: true, autocomplete: 'off', pattern: '[A-Za-z0-9][A-Za-z0-9._\\-]{0,62}', placeholder: 'data' });
    const size = h('input', { id: 'vol-size', name: 'size', autocomplete: 'off', placeholder: 'the server default, e.g. 1G' });
    const form = h('form', { class: 'card', 'aria-labelledby': 'vol-create-title' },
      h('h2', { id: 'vol-create-title' }, 'New volume'),
      h('div', { class: 'grid' }, h('label', { for: 'vol-name' }, 'Name'), name, h('label', { for: 'vol-size' }, 'Size'), size),
      h('button', { type: 'submit' }, 'Create volume'));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      clear(err);
      try {
        const v = await s.api.createVolume({ name: name.value.trim(), size: size.value.trim() || undefined });
        announce(`Created volume ${v.name}`);
        name.value = '';
        void load();
      } catch (ex) { err.appendChild(errorBox(ex)); }
    });
    return form;
  }

  const load = async () => {
    window.clearTimeout(timer);
    try {
      const list = await s.api.volumes();
      if (stopped) return;
      render(list);
    } catch (ex) { clear(err); err.appendChild(errorBox(ex)); }
    if (!stopped) timer = window.setTimeout(() => void load(), 5000);
  };
  const render = (list: Volume[]) => {
    if (list.length === 0) { listBox.replaceChildren(empty('No volumes yet.', 'Make one with “+ New volume”, then mount it when you create a sandbox.')); return; }
    listBox.replaceChildren(table('volumes', 'Your volumes', ['Volume', 'Kind', 'Size', 'Used', 'Mounted by', 'Created', 'Actions'], list.map((v) => {
      const del = h('button', { type: 'button', class: 'danger', 'aria-label': `Delete volume ${v.name}` }, 'Delete');
      del.addEventListener('click', async () => {
        const mounted = v.mounted_by.length > 0;
        const ok = await confirmDialog(`Delete volume ${v.name}?`,
          mounted ? `${v.mounted_by.length} sandbox(es) mount it: they lose it at once. Its files are gone for good.` : 'Its files are gone for good.', 'Delete');
        if (!ok) return;
        try { await s.api.deleteVolume(v.name, mounted); announce(`Deleted volume ${v.name}`); void load(); } catch (ex) { err.appendChild(errorBox(ex)); }
      });
      const browse = h('button', { type: 'button', 'aria-label': `Browse volume ${v.name}` }, 'Browse');
      browse.addEventListener('click', () => void open(v.name, '/'));
      const users = v.mounted_by.length
        ? h('span', {}, ...v.mounted_by.flatMap((id, i) => [i ? ', ' : '', h('a', { href: `#/sandboxes/${encodeURIComponent(id)}` }, h('code', {}, id))]))
        : h('span', { class: 'muted' }, 'none');
      return [h('strong', {}, v.name), v.kind, bytes(v.size), v.used === undefined ? '—' : bytes(v.used), users, new Date(v.created_at).toLocaleString(), h('span', { class: 'row' }, browse, del)];
    }), 'No volumes.', { right: [2, 3] }));
  };
  /** A volume's content, read through the volume's own routes (no sandbox needed). */
  const open = async (name: string, path: string) => {
    try {
      const { entries } = await s.api.volumeFiles(name, path);
      entries.sort((a, b) => (a.type === 'dir' ? 0 : 1) - (b.type === 'dir' ? 0 : 1) || a.name.localeCompare(b.name));
      const parts = path.split('/').filter(Boolean);
      const step = (label: string, p: string, last: boolean) => {
        if (last) return h('li', { 'aria-current': 'location' }, h('code', {}, label));
        const b = h('button', { type: 'button', class: 'link' }, label);
        b.addEventListener('click', () => void open(name, p));
        return h('li', {}, b);
      };
      const close = h('button', { type: 'button' }, 'Close');
      close.addEventListener('click', () => clear(browser));
      browser.replaceChildren(h('section', { class: 'card', 'aria-labelledby': 'vol-browse-title' },
        h('div', { class: 'row' }, h('h2', { id: 'vol-browse-title' }, 'Files of ', h('code', {}, name)), close),
        h('nav', { class: 'crumbs path', 'aria-label': 'Volume path' }, h('ol', {}, step(name, '/', parts.length === 0),
          ...parts.map((n, i) => step(n, '/' + parts.slice(0, i + 1).join('/'), i === parts.length - 1)))),
        table('volume-files', `Files in ${path}`, ['Name', 'Type', 'Size', 'Modified', 'Actions'], entries.map((e) => {
          const label = e.type === 'dir' ? h('button', { type: 'button', class: 'link' }, `${e.name}/`) : h('span', {}, e.name);
          const child = path.replace(/\/$/, '') + '/' + e.name;
          if (e.type === 'dir') label.addEventListener('click', () => void open(name, child));
          const acts: HTMLElement[] = [];
          if (e.type === 'file') {
            const dl = h('button', { type: 'button', 'aria-label': `Download ${e.name}` }, 'Download');
            dl.addEventListener('click', async () => {
              try {
                const url = URL.createObjectURL(await s.api.volumeRead(name, child));
                const a = h('a', { href: url, download: e.name });
                document.body.appendChild(a); a.click(); a.remove();
                window.setTimeout(() => URL.revokeObjectURL(url), 10000);
              } catch (ex) { err.appendChild(errorBox(ex)); }
            });
            acts.push(dl);
          }
          return [label, e.type, e.type === 'file' ? bytes(e.size) : '', e.modified_at ? new Date(e.modified_at).toLocaleString() : '', h('span', {}, ...acts)];
        }), 'An empty directory: sandboxes that mount the volume write into it.', { right: [2] })));
    } catch (ex) { browser.replaceChildren(errorBox(ex)); }
  };
  void load();
  return () => { stopped = true; window.clearTimeout(timer); };
}
