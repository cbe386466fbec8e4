import { describe, expect, it } from 'vitest';
import { parseKey, groupMetrics } from './metrics';

describe('admin metrics', () => {
  it('parses keys', () => {
    expect(parseKey('agentbox_http_request_seconds{code=2xx,route=GET /v1}_sum')).toEqual({ name: 'agentbox_http_request_seconds', labels: 'code=2xx, route=GET /v1', suffix: '_sum' });
    expect(parseKey('agentbox_sandboxes')).toEqual({ name: 'agentbox_sandboxes', labels: '', suffix: '' });
  });
  it('groups histograms and counters', () => {
    const f = groupMetrics({
      'agentbox_http_request_seconds{code=2xx}_count': 10, 'agentbox_http_request_seconds{code=2xx}_sum': 0.5,
      'agentbox_http_request_seconds{code=4xx}_count': 2, 'agentbox_http_request_seconds{code=4xx}_sum': 0.2,
      'agentbox_creates_total{result=ok}': 3, 'agentbox_creates_total{result=error}': 1,
    });
    expect(f.map((x) => [x.name, x.kind, x.total])).toEqual([['agentbox_creates_total', 'value', 4], ['agentbox_http_request_seconds', 'histogram', 12]]);
    expect(f[1].rows[0]).toEqual({ labels: 'code=2xx', value: 10, count: 10, mean: 0.05 });
    expect(f[1].title).toBe('Http request');
  });
});
