import { h } from '../dom';
import type { Session } from '../session';
import { pageHead } from './common';

/**
 * How the signed-in key is shown: never the key itself, only its last
 * four characters and its length (enough to tell two keys apart), or that
 * the server takes no key.
 */
export function keyHint(key: string): string {
  if (key === '') return 'no key (this server has authentication off)';
  if (key.length < 12) return `a key of ${key.length} characters`;
  return `…${key.slice(-4)} (${key.length} characters)`;
}

/**
 * The API keys page. The daemon does not manage keys: they are the
 * operator's settings (API_KEYS, BEARER_TOKEN), so the page says who the
 * signed-in key is, where the console keeps it and how keys are made and
 * revoked, instead of a list it could not keep true.
 */
export function keysView(main: HTMLElement, s: Session): () => void {
  const keyless = s.api.key === '';
  const code = (t: string) => h('code', {}, t);
  main.append(pageHead('API keys'),
    h('section', { class: 'card', 'aria-labelledby': 'key-self' },
      h('h2', { id: 'key-self' }, 'Signed in'),
      h('dl', { class: 'details' },
        h('dt', {}, 'User'), h('dd', { id: 'key-user' }, s.info.user),
        h('dt', {}, 'Key'), h('dd', { id: 'key-hint' }, keyHint(s.api.key)),
        h('dt', {}, 'Role'), h('dd', {}, s.operator ? 'operator (TEMPLATE_ADMIN_USERS)' : 'tenant: you see and act on your own sandboxes, volumes, secrets and webhooks'),
        h('dt', {}, 'Kept'), h('dd', {}, keyless ? 'nothing to keep' : 'in this tab\'s sessionStorage only, sent as an Authorization header; closing the tab or signing out forgets it'))),
    h('section', { class: 'card', 'aria-labelledby': 'key-managed' },
      h('h2', { id: 'key-managed' }, 'Keys are operator-managed'),
      keyless
        ? h('p', { id: 'key-managed-text' }, 'This server runs without keys: every request acts as ', code(s.info.user), '. Only run it so on a trusted machine; the operator turns keys on with ', code('API_KEYS'), ' or ', code('BEARER_TOKEN'), '.')
        : h('p', { id: 'key-managed-text' }, 'This daemon does not create, list or revoke keys through its API: the operator sets them (', code('API_KEYS=key:user,…'), ', ', code('BEARER_TOKEN'), ') and restarts it. Ask the operator for a new key or to revoke one. A user may have several keys, so a key is rotated by adding the new one, switching to it and removing the old.'),
      s.operator ? h('p', { class: 'muted small' }, 'As the operator: keys live in the daemon\'s settings (docs/configuration.md); each replica reads the same settings.') : null),
    h('section', { class: 'card', 'aria-labelledby': 'key-use' },
      h('h2', { id: 'key-use' }, 'Using your key'),
      h('ul', {},
        h('li', {}, 'HTTP: ', code('Authorization: Bearer $AGENTBOX_API_KEY'), ' (or ', code('X-API-Key'), ')'),
        h('li', {}, 'CLI, Go and Python SDKs, MCP: ', code('AGENTBOX_URL'), ' and ', code('AGENTBOX_API_KEY')),
        h('li', {}, 'E2B SDKs: ', code('E2B_API_KEY'), ', with ', code('E2B_API_URL'), ' and ', code('E2B_DOMAIN'), ' pointing here (docs/e2b.md)'))));
  return () => {};
}
