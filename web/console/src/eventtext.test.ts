import { describe, expect, it } from 'vitest';
import { describeEvent, isFailure } from './eventtext';
import type { Event } from './api';

const ev = (p: Partial<Event>): Event => ({ id: 1, time: '2026-12-02T10:00:00Z', type: 'killed', sandbox_id: 'x', owner: 'a', cause: { kind: 'api' }, ...p });

describe('events', () => {
  it('says why', () => {
    expect(describeEvent(ev({ cause: { kind: 'api', by: 'alice' } }))).toBe('by an API call (alice)');
    expect(describeEvent(ev({ type: 'stopped', cause: { kind: 'oom_kill' }, exit: { code: 137, signal: 'SIGKILL', oom_killed: true } })))
      .toBe('out of memory (OOM killer) · exit 137 SIGKILL, OOM-killed');
    expect(describeEvent(ev({ type: 'created', data: { from_pool: true } }))).toContain('from a warm pool');
  });
  it('tells failures from endings', () => {
    expect(isFailure(ev({ type: 'lost', cause: { kind: 'daemon_restart' } }))).toBe(true);
    expect(isFailure(ev({ type: 'killed', cause: { kind: 'api' } }))).toBe(false);
    expect(isFailure(ev({ type: 'stopped', cause: { kind: 'agent_exit' } }))).toBe(true);
    expect(isFailure(ev({ type: 'expired', cause: { kind: 'timeout' } }))).toBe(false);
  });
});
