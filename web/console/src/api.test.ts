import { describe, expect, it } from 'vitest';
import { errorFrom, ApiError } from './api';

describe('API errors', () => {
  it('keeps the API\'s code and words', async () => {
    const res = new Response(JSON.stringify({ code: 'not_found', message: 'sandbox "x" not found', request_id: 'r1' }), { status: 404 });
    const e = await errorFrom(res);
    expect(e).toBeInstanceOf(ApiError);
    expect(e.status).toBe(404);
    expect(e.toString()).toBe('not_found: sandbox "x" not found');
    expect(e.requestId).toBe('r1');
  });
  it('falls back to the text of a non-JSON answer', async () => {
    const e = await errorFrom(new Response('bad gateway', { status: 502 }));
    expect(e.toString()).toBe('http_502: bad gateway');
  });
});
