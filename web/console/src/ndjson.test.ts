import { describe, expect, it } from 'vitest';
import { LineSplitter, readNDJSON } from './ndjson';

describe('ndjson', () => {
  it('splits lines across chunks', () => {
    const s = new LineSplitter();
    expect(s.push('{"a":1}\n{"b"')).toEqual(['{"a":1}']);
    expect(s.push(':2}\n\n')).toEqual(['{"b":2}']);
    expect(s.push('{"c":3}')).toEqual([]);
    expect(s.end()).toEqual(['{"c":3}']);
  });
  it('reads a stream of events, also a multi-byte character split across chunks', async () => {
    const bytes = new TextEncoder().encode('{"type":"output","output":"héllo"}\n{"type":"done"}\n');
    const cut = 30; // inside é? keep it simple: any cut must work
    const body = new ReadableStream<Uint8Array>({
      start(c) { c.enqueue(bytes.slice(0, cut)); c.enqueue(bytes.slice(cut)); c.close(); },
    });
    const events: unknown[] = [];
    await readNDJSON(body, (e) => events.push(e));
    expect(events).toEqual([{ type: 'output', output: 'héllo' }, { type: 'done' }]);
  });
});
