import { describe, it, expect } from 'vitest';
import { snapshotOf } from './views/snapshots';
import type { Template } from './api';

const t = (source?: string): Template => ({ name: 'n', tag: 'latest', kind: 'image', source, layers: [], size: 0, created: '', in_use: 0 });

describe('snapshotOf', () => {
  it('finds the sandbox of a snapshot template only', () => {
    expect(snapshotOf(t('snapshot of abc123'))).toBe('abc123');
    expect(snapshotOf(t('docker.io/library/python:3'))).toBeNull();
    expect(snapshotOf(t())).toBeNull();
  });
});
