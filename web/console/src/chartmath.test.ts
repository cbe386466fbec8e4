import { describe, expect, it } from 'vitest';
import { niceTicks, axisUnit, formatValue, timeTicks, timeLabel, nearestIndex } from './chartmath';

describe('charts', () => {
  it('picks nice ticks from zero', () => {
    expect(niceTicks(7)).toEqual([0, 2, 4, 6, 8]);
    expect(niceTicks(1)).toEqual([0, 0.25, 0.5, 0.75, 1]);
    expect(niceTicks(0)).toEqual([0, 0.25, 0.5, 0.75, 1]);
    expect(niceTicks(430)).toEqual([0, 200, 400, 600]);
    expect(niceTicks(0.1)).toEqual([0, 0.025, 0.05, 0.075, 0.1]);
  });
  it('labels units', () => {
    expect(axisUnit('bytes', 3 * 1024 ** 3)).toEqual({ div: 1024 ** 3, label: 'GiB' });
    expect(axisUnit('cores', 2).label).toBe('cores');
    expect(formatValue(1536, 'bytes')).toBe('1.5 KiB');
    expect(formatValue(0.5, 'cores')).toBe('0.50 cores');
    expect(formatValue(3, 'per_min')).toBe('3/min');
    expect(formatValue(null, 'count')).toBe('—');
  });
  it('spreads time ticks at round steps', () => {
    const t0 = Date.UTC(2026, 0, 1, 10, 0, 0), t1 = t0 + 3600_000;
    const ticks = timeTicks(t0, t1, 5);
    expect(ticks.length).toBeGreaterThanOrEqual(3);
    expect(ticks.length).toBeLessThanOrEqual(6);
    expect((ticks[1] - ticks[0]) % 60_000).toBe(0);
    expect(timeLabel(t0, 3600_000)).toMatch(/^\d\d:\d\d$/);
    expect(timeLabel(t0, 7 * 86400_000)).toMatch(/^[A-Z][a-z]{2} \d+ \d\dh$/);
  });
  it('finds the nearest sample', () => {
    expect(nearestIndex(0, 100, 5)).toBe(0);
    expect(nearestIndex(100, 100, 5)).toBe(4);
    expect(nearestIndex(52, 100, 5)).toBe(2);
    expect(nearestIndex(500, 100, 5)).toBe(4);
  });
});
