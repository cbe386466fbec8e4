import { describe, expect, it } from 'vitest';
import { tar } from './tar';

const dec = new TextDecoder();

describe('tar', () => {
  it('writes a ustar archive with a valid checksum, padded, with the end blocks', () => {
    const data = new TextEncoder().encode('FROM host\n');
    const t = tar([{ name: 'Dockerfile', data }], 1700000000);
    expect(t.length).toBe(512 + 512 + 1024);
    expect(dec.decode(t.slice(0, 10))).toBe('Dockerfile');
    expect(dec.decode(t.slice(257, 262))).toBe('ustar');
    expect(parseInt(dec.decode(t.slice(124, 135)), 8)).toBe(data.length);
    expect(parseInt(dec.decode(t.slice(136, 147)), 8)).toBe(1700000000);
    // The checksum: the header's bytes summed with the checksum field as spaces.
    const h = t.slice(0, 512);
    const stored = parseInt(dec.decode(h.slice(148, 154)), 8);
    h.fill(32, 148, 156);
    expect(h.reduce((a, b) => a + b, 0)).toBe(stored);
    expect(dec.decode(t.slice(512, 512 + data.length))).toBe('FROM host\n');
    expect(t.slice(512 + data.length).every((b) => b === 0)).toBe(true);
  });
  it('refuses names that leave the context or do not fit', () => {
    expect(() => tar([{ name: '../x', data: new Uint8Array() }])).toThrow('inside the context');
    expect(() => tar([{ name: '/etc/x', data: new Uint8Array() }])).toThrow('inside the context');
    expect(() => tar([{ name: 'a'.repeat(101), data: new Uint8Array() }])).toThrow('too long');
  });
});
