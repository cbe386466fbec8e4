// How the console words an event, and which events are failures (the same
// rule as GET /v1/overview: internal/overview Failure).
import type { Event } from './api';

const FAILING = new Set(['oom_kill', 'pids_limit', 'agent_exit', 'node_lost', 'internal']);

export function isFailure(e: Pick<Event, 'type' | 'cause'>): boolean {
  if (e.type === 'lost') return true;
  return (e.type === 'stopped' || e.type === 'killed') && FAILING.has(e.cause?.kind);
}

const CAUSES: Record<string, string> = {
  api: 'by an API call', timeout: 'at its end time', idle: 'idle too long', paused_ttl: 'paused too long',
  session_released: 'its session was released', oom_kill: 'out of memory (OOM killer)', pids_limit: 'at its process limit',
  agent_exit: 'its agent exited', daemon_shutdown: 'the daemon shut down', daemon_restart: 'the daemon restarted',
  node_lost: 'its node was lost', internal: 'daemon housekeeping',
};

/** "by an API call (alice) · exit 137 SIGKILL · from a pool" */
export function describeEvent(e: Event): string {
  const parts: string[] = [];
  const c = e.cause;
  if (c?.kind) parts.push(`${CAUSES[c.kind] ?? c.kind}${c.by ? ` (${c.by})` : ''}`);
  if (c?.detail) parts.push(c.detail);
  if (e.exit) parts.push(`exit ${e.exit.code}${e.exit.signal ? ` ${e.exit.signal}` : ''}${e.exit.oom_killed ? ', OOM-killed' : ''}`);
  const d = e.data ?? {};
  if (d.from_pool) parts.push('from a warm pool');
  if (typeof d.end_at === 'string') parts.push(`ends ${new Date(d.end_at).toLocaleString()}`);
  if (typeof d.template === 'string') parts.push(`template ${d.template}`);
  if (d.cmd) parts.push(`command ${Array.isArray(d.cmd) ? d.cmd.join(' ') : String(d.cmd)}`);
  return parts.join(' · ');
}
