import { h, clear, announce, confirmDialog, errorBox } from '../dom';
import type { Secret } from '../api';
import type { Session } from '../session';
import { loading, empty, pageHead, table } from './common';

/**
 * The caller's secrets (GET/PUT/DELETE /v1/secrets): names, versions and
 * placeholders only. A value goes in once, through a password field, and
 * no route gives it back.
 */
export function secretsView(main: HTMLElement, s: Session): () => void {
  const err = h('div', { 'aria-live': 'assertive' });
  const listBox = h('div', {}, loading('Loading secrets…'));
  const rotateBox = h('div', {});
  const create = h('details', { class: 'create' }, h('summary', { class: 'button primary', role: 'button' }, '+ New secret'),
    valueForm('new', 'New secret', 'Create secret', true));
  main.append(pageHead('Secrets', create),
    h('p', { class: 'muted small' }, 'Values are encrypted at rest and never shown again. The egress broker puts a secret into requests to the hosts your network rules bind it to; sandboxes only see its placeholder (docs/secrets.md).'),
    err, rotateBox, listBox);
  let stopped = false;

  function valueForm(key: string, title: string, submit: string, withName: boolean, fixedName?: string): HTMLElement {
    const name = h('input', { id: `sec-${key}-name`, name: 'name', required: true, autocomplete: 'off', placeholder: 'OPENAI_API_KEY' });
    const value = h('input', { id: `sec-${key}-value`, name: 'value', type: 'password', required: true, autocomplete: 'new-password' });
    const form = h('form', { class: 'card', 'aria-labelledby': `sec-${key}-title` },
      h('h2', { id: `sec-${key}-title` }, title),
      h('div', { class: 'grid' },
        ...(withName ? [h('label', { for: `sec-${key}-name` }, 'Name'), name] : []),
        h('label', { for: `sec-${key}-value` }, 'Value'), value),
      h('div', { class: 'row' }, h('button', { type: 'submit' }, submit)));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      clear(err);
      const n = fixedName ?? name.value.trim();
      try {
        const sec = await s.api.putSecret(n, value.value);
        value.value = '';
        name.value = '';
        announce(`${fixedName ? 'Rotated' : 'Created'} secret ${sec.name} (version ${sec.version})`);
        if (fixedName) clear(rotateBox);
        void load();
      } catch (ex) { err.appendChild(errorBox(ex)); }
    });
    return form;
  }

  const load = async () => {
    try {
      const { secrets } = await s.api.secrets();
      if (!stopped) render(secrets);
    } catch (ex) { listBox.replaceChildren(errorBox(ex)); }
  };
  const render = (list: Secret[]) => {
    if (list.length === 0) { listBox.replaceChildren(empty('No secrets yet.', 'Add one with “+ New secret”, then bind it to a host in a sandbox\'s network rules.')); return; }
    listBox.replaceChildren(table('secrets', 'Your secrets', ['Name', 'Version', 'Placeholder', 'Updated', 'Actions'], list.map((sec) => {
      const rotate = h('button', { type: 'button', 'aria-label': `Rotate secret ${sec.name}` }, 'Rotate');
      rotate.addEventListener('click', () => {
        const f = valueForm('rotate', `New value for ${sec.name}`, 'Replace value', false, sec.name);
        rotateBox.replaceChildren(f);
        f.querySelector<HTMLInputElement>('input')?.focus();
      });
      const del = h('button', { type: 'button', class: 'danger', 'aria-label': `Delete secret ${sec.name}` }, 'Delete');
      del.addEventListener('click', async () => {
        if (!(await confirmDialog(`Delete secret ${sec.name}?`, 'Network rules naming it stop injecting it at once.', 'Delete'))) return;
        try { await s.api.deleteSecret(sec.name); announce(`Deleted secret ${sec.name}`); void load(); } catch (ex) { err.appendChild(errorBox(ex)); }
      });
      return [h('strong', {}, sec.name), String(sec.version), h('code', {}, sec.placeholder), new Date(sec.updated_at).toLocaleString(), h('span', { class: 'row' }, rotate, del)];
    }), 'No secrets.', { right: [1] }));
  };
  void load();
  return () => { stopped = true; };
}
