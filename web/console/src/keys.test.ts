import { describe, it, expect } from 'vitest';
import { keyHint } from './views/keys';

describe('keyHint', () => {
  it('shows only the last four characters and the length of a key', () => {
    const k = 'ab-secret-secret-7f3e';
    const hint = keyHint(k);
    expect(hint).toBe('…7f3e (21 characters)');
    expect(hint).not.toContain('secret');
  });
  it('shows nothing of a short key', () => {
    expect(keyHint('key-alice')).toBe('a key of 9 characters');
  });
  it('says when the server takes no key', () => {
    expect(keyHint('')).toContain('authentication off');
  });
});
