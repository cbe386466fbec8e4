import { h, clear, errorBox } from '../dom';
import { bytes, layerSizes } from '../format';
import { pageHead, loading } from './common';
import { readNDJSON } from '../ndjson';
import { tar } from '../tar';
import type { Session } from '../session';
import type { BuiltinTemplate } from '../api';

export function templatesView(main: HTMLElement, s: Session): () => void {
  const err = h('div', {});
  const body = h('tbody', {});
  const summary = h('span', { class: 'muted small', id: 'templates-size' });
  body.appendChild(h('tr', {}, h('td', { colspan: 8 }, loading('Loading templates…'))));
  main.append(pageHead('Templates', summary), err, h('div', { class: 'card' }, h('table', { class: 'list stack', id: 'templates' },
    h('caption', { class: 'sr-only' }, 'Templates'),
    h('thead', {}, h('tr', {}, ...['Name', 'Kind', 'Layers', 'Size', 'Own layers', 'In use', 'Created', 'Source'].map((c) => h('th', { scope: 'col' }, c)))), body)));
  // The built-in templates not ready yet (building, failed, not built).
  const builtins = h('ul', { id: 'builtin-templates', 'aria-label': 'Built-in templates not ready', class: 'small' });
  const builtinBox = h('section', { class: 'card', hidden: true, 'aria-labelledby': 'builtin-h' }, h('h2', { id: 'builtin-h' }, 'Built-in templates not ready'), builtins);
  main.append(builtinBox);
  const load = async () => {
    clear(err);
    try {
      const { templates, builtin } = await s.api.templates();
      clear(builtins);
      for (const b of builtin ?? []) {
        if (b.state !== 'ready') builtins.appendChild(h('li', {}, builtinState(b)));
      }
      builtinBox.hidden = builtins.childElementCount === 0;
      clear(body);
      const sizes = layerSizes(templates);
      summary.textContent = `${templates.length} stored · ${bytes(sizes.total)} on disk (shared layers counted once)`;
      for (const t of templates) {
        body.appendChild(h('tr', {},
          h('th', { scope: 'row' }, `${t.name}:${t.tag}`), h('td', { 'data-label': 'Kind' }, t.kind),
          h('td', { 'data-label': 'Layers' }, h('details', {}, h('summary', {}, String(t.layers?.length ?? 0)),
            h('ul', {}, ...(t.layers ?? []).map((l) => h('li', {}, h('code', {}, (l.diff_id ?? '').slice(0, 19)), ' ', bytes(l.size)))))),
          h('td', { 'data-label': 'Size', class: 'num' }, bytes(t.size)), h('td', { 'data-label': 'Own layers', class: 'num', title: 'bytes of the layers no other template shares' }, bytes(sizes.own.get(`${t.name}:${t.tag}`) ?? 0)),
          h('td', { 'data-label': 'In use', class: 'num' }, String(t.in_use)),
          h('td', { 'data-label': 'Created' }, t.created && Date.parse(t.created) > 0 ? new Date(t.created).toLocaleString() : ''), h('td', { 'data-label': 'Source' }, t.source ?? '')));
      }
      if (templates.length === 0) body.appendChild(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No stored templates; "host" and the configured names are always there.')));
    } catch (ex) { err.appendChild(errorBox(ex)); }
  };
  void load();
  if (s.operator) main.appendChild(buildForm(s, () => void load()));
  else main.appendChild(h('p', { class: 'muted small' }, 'Building templates is for the operator.'));
  let ctrl: AbortController | null = null;
  return () => ctrl?.abort();

  function buildForm(s: Session, built: () => void): HTMLElement {
    const tag = h('input', { id: 'build-tag', name: 'tag', required: true, placeholder: 'my-template:1' });
    const df = h('textarea', { id: 'build-dockerfile', name: 'dockerfile', rows: 8, spellcheck: 'false' });
    df.value = 'FROM debian:bookworm\nRUN echo hello > /hello\n';
    const noCache = h('input', { id: 'build-nocache', type: 'checkbox' });
    const submit = h('button', { type: 'submit' }, 'Build');
    const out = h('pre', { class: 'buildlog', role: 'log', 'aria-live': 'polite', 'aria-label': 'Build log', id: 'build-log' });
    const form = h('form', { class: 'card', 'aria-labelledby': 'build-title' },
      h('h2', { id: 'build-title' }, 'Build from a Dockerfile'),
      h('div', { class: 'grid' },
        h('label', { for: 'build-tag' }, 'Tag'), tag,
        h('label', { for: 'build-dockerfile' }, 'Dockerfile'), df,
        h('label', { for: 'build-nocache' }, 'Without cache'), noCache),
      submit, out);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      out.textContent = '';
      submit.disabled = true;
      ctrl = new AbortController();
      try {
        const ctx = tar([{ name: 'Dockerfile', data: new TextEncoder().encode(df.value) }]);
        const fd = new FormData();
        fd.append('options', new Blob([JSON.stringify({ tags: [tag.value.trim()], no_cache: noCache.checked })], { type: 'application/json' }));
        fd.append('context', new Blob([ctx as BlobPart], { type: 'application/x-tar' }), 'context.tar');
        const res = await s.api.request('POST', '/v1/templates/builds', { body: fd, signal: ctrl.signal });
        await readNDJSON(res.body!, (ev) => {
          out.textContent += describe(ev) + '\n';
          out.scrollTop = out.scrollHeight;
        });
        built();
      } catch (ex) {
        out.textContent += String(ex instanceof Error ? ex.toString() : ex) + '\n';
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }
}

/** builtinState says where a built-in template stands, as template ls does. */
export function builtinState(b: BuiltinTemplate): string {
  const secs = (ms?: number) => `${Math.round((ms ?? 0) / 1000)}s`;
  switch (b.state) {
    case 'building': return `${b.name}: building for ${secs(b.elapsed_ms)}${b.estimate_ms ? ` of about ${secs(b.estimate_ms)}` : ''}${b.progress ? ` (${b.progress})` : ''}`;
    case 'failed': return `${b.name}: failed: ${b.error ?? ''}; build it with: ${b.command ?? 'make templates'}`;
    case 'not_built': return `${b.name}: not built; build it with: ${b.command ?? 'make templates'}`;
    default: return `${b.name}: ready`;
  }
}

function describe(ev: Record<string, any>): string {
  switch (ev.type) {
    case 'step': return `Step ${ev.step}/${ev.steps}: ${ev.instruction}`;
    case 'output': return String(ev.output ?? '').replace(/\n$/, '');
    case 'cached': return '  (cached)';
    case 'result': return `  → ${ev.id ?? ''}${ev.duration_ms != null ? ` (${ev.duration_ms} ms)` : ''}`;
    case 'running': return `  running in ${ev.sandbox ?? 'a build sandbox'}`;
    case 'done': return `Done: ${(ev.tags ?? []).join(', ')} ${ev.digest ?? ''}`;
    case 'error': return `Error${ev.line ? ` (line ${ev.line})` : ''}: ${ev.error?.code ?? ''} ${ev.error?.message ?? ev.message ?? ''}`;
    case 'warning': return `Warning: ${ev.message}`;
    default: return JSON.stringify(ev);
  }
}
