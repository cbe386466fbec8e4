// The signed-in state. The key lives in this tab's sessionStorage (gone
// when the tab closes; never localStorage or a cookie, which other tabs,
// later visits or requests would carry).
import { Api, type Info } from './api';

const KEY = 'agentbox.console.key';

export interface Session { api: Api; info: Info; operator: boolean }

export function storedKey(): string | null {
  try { return sessionStorage.getItem(KEY); } catch { return null; }
}

export function storeKey(key: string): void {
  try { sessionStorage.setItem(KEY, key); } catch { /* private mode: memory only */ }
}

export function forgetKey(): void {
  try { sessionStorage.removeItem(KEY); } catch { /* nothing stored */ }
}

/** Checks a key against the API and learns who it is and what it may do. */
export async function signIn(key: string): Promise<Session> {
  const api = new Api(key);
  const info = await api.info();
  let operator = false;
  try {
    await api.pools();
    operator = true;
  } catch {
    operator = false; // 403: a tenant's key
  }
  return { api, info, operator };
}
