import './style.css';
import { h, clear, errorBox } from './dom';
import { signIn, storedKey, storeKey, forgetKey, type Session } from './session';
import { sandboxesView } from './views/sandboxes';
import { sandboxView } from './views/sandbox';
import { templatesView } from './views/templates';
import { poolsView } from './views/pools';
import { adminView } from './views/admin';
import { overviewView } from './views/overview';
import { eventsView } from './views/events';
import { webhooksView } from './views/webhooks';
import { volumesView } from './views/volumes';
import { secretsView } from './views/secrets';
import { snapshotsView } from './views/snapshots';
import { keysView } from './views/keys';

/**
 * The console's pages, in navigation order: the extension point for new
 * resources (volumes, snapshots, secrets: add a view under views/ and an
 * entry here; `operator` hides it from tenants).
 */
interface Page { id: string; label: string; operator?: boolean; view: (main: HTMLElement, s: Session, args: string[]) => () => void }
const PAGES: Page[] = [
  { id: 'overview', label: 'Overview', view: (m, s) => overviewView(m, s) },
  { id: 'sandboxes', label: 'Sandboxes', view: (m, s, [id, tab]) => (id ? sandboxView(m, s, id, tab || 'terminal') : sandboxesView(m, s)) },
  { id: 'templates', label: 'Templates', view: (m, s) => templatesView(m, s) },
  { id: 'pools', label: 'Pools', view: (m, s) => poolsView(m, s) },
  { id: 'events', label: 'Events', view: (m, s) => eventsView(m, s) },
  { id: 'volumes', label: 'Volumes', view: (m, s) => volumesView(m, s) },
  { id: 'snapshots', label: 'Snapshots', view: (m, s) => snapshotsView(m, s) },
  { id: 'secrets', label: 'Secrets', view: (m, s) => secretsView(m, s) },
  { id: 'webhooks', label: 'Webhooks', view: (m, s) => webhooksView(m, s) },
  { id: 'keys', label: 'API keys', view: (m, s) => keysView(m, s) },
  { id: 'admin', label: 'Admin', operator: true, view: (m, s) => adminView(m, s) },
];

const app = document.getElementById('app')!;
let session: Session | null = null;
/** Called when the current view goes away (timers, sockets). */
let teardown: (() => void) | null = null;

function signInView(message?: unknown): void {
  stop();
  clear(app);
  const input = h('input', { id: 'key', name: 'key', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'key-help' });
  const err = h('div', { id: 'signin-error' });
  if (message) err.appendChild(errorBox(message));
  const form = h('form', { class: 'card signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'agentbox console'),
    h('label', { for: 'key' }, 'API key'),
    input,
    h('p', { id: 'key-help', class: 'muted' }, 'Your key stays in this tab only and is sent as an Authorization header. On a server without keys, leave it empty and sign in.'),
    h('button', { type: 'submit' }, 'Sign in'),
    err);
  input.required = false;
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(err);
    try {
      session = await signIn(input.value.trim());
      storeKey(input.value.trim());
      if (!location.hash || location.hash === '#/signin') location.hash = '#/sandboxes';
      route();
    } catch (ex) {
      err.appendChild(errorBox(ex));
      input.focus();
    }
  });
  app.appendChild(h('main', { id: 'main', tabindex: -1 }, form));
  input.focus();
}

function stop(): void {
  if (teardown) teardown();
  teardown = null;
}

function shell(active: string, s: Session): HTMLElement {
  const link = (href: string, label: string, id: string) =>
    h('a', { href, 'aria-current': active === id ? 'page' : undefined }, label);
  const signOut = h('button', { type: 'button', class: 'link' }, 'Sign out');
  signOut.addEventListener('click', () => { forgetKey(); session = null; location.hash = '#/signin'; signInView(); });
  const nav = h('nav', { 'aria-label': 'Console' },
    h('ul', {}, ...PAGES.filter((p) => !p.operator || s.operator).map((p) => h('li', {}, link(`#/${p.id}`, p.label, p.id)))));
  const header = h('header', { class: 'top' },
    h('a', { class: 'brand', href: '#/sandboxes' }, 'agentbox'),
    nav,
    h('span', { class: 'who' }, `${s.info.user}${s.operator ? ' (operator)' : ''}`, ' ', signOut));
  const main = h('main', { id: 'main', tabindex: -1 });
  clear(app);
  app.append(header, main, h('div', { id: 'status', role: 'status', 'aria-live': 'polite', class: 'sr-only' }));
  return main;
}

function route(): void {
  // Moving between a sandbox's tabs keeps focus on the tabs (ARIA tabs);
  // any other navigation puts it at the start of the new page.
  const fromTab = document.activeElement?.getAttribute('role') === 'tab';
  stop();
  if (!session) { signInView(); return; }
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const [page, id, tab] = parts;
  let main: HTMLElement;
  const found = PAGES.find((p) => p.id === (page || 'sandboxes') && (!p.operator || session!.operator));
  if (found) {
    main = shell(found.id, session);
    teardown = found.view(main, session, [id, tab].filter((x) => x !== undefined && x !== ''));
  } else {
    main = shell('', session);
    main.append(h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '#/sandboxes' }, 'Back to sandboxes')));
  }
  const tabEl = fromTab ? main.querySelector<HTMLElement>('[role=tab][aria-selected=true]') : null;
  (tabEl ?? main).focus({ preventScroll: true });
}

window.addEventListener('hashchange', () => { if (session) route(); });
window.addEventListener('agentbox:unauthorized', (e) => {
  if (!session) return; // signing in: the form shows the error itself
  forgetKey();
  session = null;
  signInView((e as CustomEvent).detail);
});

async function start(): Promise<void> {
  const key = storedKey();
  if (key === null) { signInView(); return; }
  try {
    session = await signIn(key);
    route();
  } catch (ex) {
    forgetKey();
    signInView(ex);
  }
}

void start();
