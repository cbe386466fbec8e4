// The /v1 API as the console calls it: the key goes in the Authorization
// header of each request (never a cookie, never a URL), errors come back
// as ApiError with the API's own code and message.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly requestId?: string,
    readonly field?: string,
  ) {
    super(message);
  }
  /** The error as the API words it: "code: message". */
  toString(): string {
    return `${this.code}: ${this.message}`;
  }
}

/** Turns an error response into an ApiError (the API's JSON error shape, or the raw text). */
export async function errorFrom(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => '');
  try {
    const body = JSON.parse(text) as { code?: string; message?: string; request_id?: string; field?: string; detail?: string };
    if (body && (body.message || body.detail)) {
      return new ApiError(res.status, body.code ?? `http_${res.status}`, body.message ?? body.detail ?? '', body.request_id, body.field);
    }
  } catch {
    /* not JSON */
  }
  return new ApiError(res.status, `http_${res.status}`, text.trim() || res.statusText || `HTTP ${res.status}`);
}

export interface Sandbox {
  id: string;
  template: string;
  type?: string;
  state: string;
  created_at: string;
  end_at: string;
  metadata?: Record<string, string>;
  resources?: { memory?: number; cpus?: number; pids?: number; disk?: number };
  network?: { mode?: string };
  isolation?: string;
  from_pool?: boolean;
}

export interface Stats {
  memory_bytes?: number;
  memory_max_bytes?: number;
  memory_limit?: number;
  cpu_seconds?: number;
  pids?: number;
  pids_limit?: number;
  disk_used_bytes?: number;
  disk_total_bytes?: number;
}

export interface Entry { name: string; path: string; type: string; size?: number; mode?: string; modified_at?: string }
export interface LogEntry { timestamp: string; level: string; message: string; fields?: Record<string, unknown> }
/** A built-in template's state: the daemon builds them at start (docs/templates.md). */
export interface BuiltinTemplate { name: string; state: 'ready' | 'building' | 'failed' | 'not_built'; progress?: string; elapsed_ms?: number; estimate_ms?: number; error?: string; command?: string }
export interface Template { name: string; tag: string; kind: string; digest?: string; source?: string; layers: { diff_id?: string; size?: number }[]; size: number; created: string; in_use: number }
export interface Info { version: string; backend: string; capabilities: Record<string, unknown>; templates: Record<string, string>; pools: Record<string, number>; user: string }
export interface PoolStats { template: string; size: number; ready: number; filling: number; hits: number; misses: number; fills: number; fill_errors: number; avg_fill_ms: number; last_fill_ms: number }

export interface Event { id: number; time: string; type: string; sandbox_id: string; owner: string; template?: string; node?: string; cause: { kind: string; by?: string; detail?: string }; exit?: { code: number; signal?: string; oom_killed?: boolean }; data?: Record<string, unknown> }
export interface EventPage { events: Event[]; next_cursor: number; has_more: boolean }
export interface Volume { id: string; name: string; kind: string; size: number; used?: number; created_at: string; node?: string; mounted_by: string[] }
export interface Webhook { id: string; owner: string; name?: string; url: string; events: string[]; enabled: boolean; all_tenants?: boolean; secret?: string; created_at: string; updated_at: string }
export interface Delivery { id: string; event_id: number; event_type: string; sandbox_id: string; status: 'delivered' | 'failed' | 'dropped'; attempts: number; status_code?: number; error?: string; time: string }
export interface MetricPoint { timestamp: string; span_seconds: number; cpu_seconds: number; cpu_count: number; cpu_used_pct: number; memory_bytes: number; memory_limit: number; disk_used_bytes: number; disk_total_bytes: number; pids: number; network_denials: number; network_tx_bytes?: number; network_rx_bytes?: number }
export interface AuditEntry { id: number; time: string; user: string; remote: string; method: string; path: string; route?: string; target?: string; status: number; duration_ms?: number; request_id?: string }
export interface Bucket { time: string; running: number; paused: number; stopped: number; total: number; creates: number; failures: number; cpu_cores: number; memory_bytes: number }
export interface TenantRow { user: string; sandboxes: number; running: number; creates: number; failures: number; cpu_cores: number; memory_bytes: number; memory_limit_bytes: number }
export interface OverviewSeries { range: string; start: string; end: string; step_seconds: number; buckets: Bucket[]; now: Bucket; capacity: { cpus: number; memory_bytes: number }; tenants?: TenantRow[]; partial?: boolean }

export interface ExecRecord { time: string; cmd: string; truncated?: boolean; user: string; exit_code: number; status?: string; timed_out?: boolean; oom_killed?: boolean; error?: string; duration_ms: number }
export interface Secret { id: string; name: string; version: number; placeholder: string; created_at: string; updated_at: string; metadata?: Record<string, string> }

export class Api {
  constructor(readonly key: string, readonly base = '') {}

  private headers(extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { ...extra };
    if (this.key) h.Authorization = `Bearer ${this.key}`;
    return h;
  }

  /** A raw request; throws ApiError on a non-2xx answer. */
  async request(method: string, path: string, init: { body?: BodyInit; json?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<Response> {
    const headers = this.headers(init.headers);
    let body = init.body;
    if (init.json !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(init.json);
    } else if (method === 'POST' && body === undefined) {
      // Every POST declares JSON, even without a body (the browser guard).
      headers['Content-Type'] = 'application/json';
    }
    const res = await fetch(this.base + path, { method, headers, body, signal: init.signal, credentials: 'omit', cache: 'no-store' });
    if (!res.ok) {
      const err = await errorFrom(res);
      // A key that stopped working (revoked, server restarted with other
      // keys) ends the session: the console goes back to signing in.
      if (res.status === 401) window.dispatchEvent(new CustomEvent('agentbox:unauthorized', { detail: err }));
      throw err;
    }
    return res;
  }

  async json<T>(method: string, path: string, json?: unknown): Promise<T> {
    const res = await this.request(method, path, { json });
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }

  info() { return this.json<Info>('GET', '/v1/info'); }
  list(metadata?: string) {
    const q = new URLSearchParams({ limit: '1000' });
    if (metadata) q.set('metadata', metadata);
    return this.json<{ sandboxes: Sandbox[] }>('GET', `/v1/sandboxes?${q}`);
  }
  get(id: string) { return this.json<Sandbox>('GET', `/v1/sandboxes/${enc(id)}`); }
  create(body: Record<string, unknown>) { return this.json<Sandbox>('POST', '/v1/sandboxes', body); }
  kill(id: string) { return this.json<void>('DELETE', `/v1/sandboxes/${enc(id)}`); }
  extend(id: string, seconds: number) { return this.json<Sandbox>('POST', `/v1/sandboxes/${enc(id)}/refresh`, { duration: seconds }); }
  pause(id: string) { return this.json<Sandbox>('POST', `/v1/sandboxes/${enc(id)}/pause`); }
  resume(id: string) { return this.json<Sandbox>('POST', `/v1/sandboxes/${enc(id)}/resume`); }
  stats(id: string) { return this.json<Stats>('GET', `/v1/sandboxes/${enc(id)}/stats`); }
  logs(id: string) { return this.json<{ logs: LogEntry[] }>('GET', `/v1/sandboxes/${enc(id)}/logs?limit=500`); }
  files(id: string, path: string) { return this.json<{ entries: Entry[] }>('GET', `/v1/sandboxes/${enc(id)}/files/list?path=${encodeURIComponent(path)}`); }
  async read(id: string, path: string): Promise<Blob> {
    const res = await this.request('GET', `/v1/sandboxes/${enc(id)}/files?path=${encodeURIComponent(path)}`);
    return res.blob();
  }
  write(id: string, path: string, data: Blob | string) {
    return this.request('PUT', `/v1/sandboxes/${enc(id)}/files?path=${encodeURIComponent(path)}`, { body: data, headers: { 'Content-Type': 'application/octet-stream' } });
  }
  mkdir(id: string, path: string) { return this.json<Entry>('POST', `/v1/sandboxes/${enc(id)}/files/mkdir`, { path }); }
  remove(id: string, path: string) { return this.request('DELETE', `/v1/sandboxes/${enc(id)}/files?path=${encodeURIComponent(path)}`); }
  ptyTicket(id: string) { return this.json<{ ticket: string; protocols: string[] }>('POST', `/v1/sandboxes/${enc(id)}/pty-tickets`); }
  previewToken(id: string, port: number) { return this.json<{ url?: string; path: string; expires_at: string }>('POST', `/v1/sandboxes/${enc(id)}/preview-tokens`, { port }); }
  desktopLink(id: string, mode: 'view' | 'interactive') { return this.json<{ url?: string; path: string; mode: string; expires_at: string }>('POST', `/v1/sandboxes/${enc(id)}/desktop/links`, { mode }); }
  templates() { return this.json<{ templates: Template[]; builtin?: BuiltinTemplate[] }>('GET', '/v1/templates'); }
  pools() { return this.json<{ pools: PoolStats[] }>('GET', '/v1/pools'); }
  events(q: Record<string, string>) { return this.json<EventPage>('GET', `/v1/events?${new URLSearchParams(q)}`); }
  series(range: string) { return this.json<OverviewSeries>('GET', `/v1/overview?range=${encodeURIComponent(range)}`); }
  metrics(id: string) { return this.json<{ resolution_seconds: number; points: MetricPoint[] }>('GET', `/v1/sandboxes/${enc(id)}/metrics`); }
  audit(q: Record<string, string>) { return this.json<{ entries: AuditEntry[]; next_cursor: number; has_more: boolean }>('GET', `/v1/audit?${new URLSearchParams(q)}`); }
  volumes() { return this.json<Volume[]>('GET', '/v1/volumes'); }
  createVolume(body: { name: string; size?: string }) { return this.json<Volume>('POST', '/v1/volumes', body); }
  deleteVolume(name: string, force = false) { return this.json<void>('DELETE', `/v1/volumes/${enc(name)}${force ? '?force=true' : ''}`); }
  volumeFiles(name: string, path: string) { return this.json<{ entries: Entry[] }>('GET', `/v1/volumes/${enc(name)}/files/list?path=${encodeURIComponent(path)}`); }
  async volumeRead(name: string, path: string): Promise<Blob> {
    return (await this.request('GET', `/v1/volumes/${enc(name)}/files?path=${encodeURIComponent(path)}`)).blob();
  }
  webhooks() { return this.json<{ webhooks: Webhook[] }>('GET', '/v1/webhooks'); }
  createWebhook(body: Record<string, unknown>) { return this.json<Webhook>('POST', '/v1/webhooks', body); }
  updateWebhook(id: string, body: Record<string, unknown>) { return this.json<Webhook>('PATCH', `/v1/webhooks/${enc(id)}`, body); }
  deleteWebhook(id: string) { return this.json<void>('DELETE', `/v1/webhooks/${enc(id)}`); }
  redeliver(id: string, delivery: string) { return this.json<Delivery>('POST', `/v1/webhooks/${enc(id)}/deliveries/${enc(delivery)}/redeliver`); }
  deliveries(id: string) { return this.json<{ deliveries: Delivery[] }>('GET', `/v1/webhooks/${enc(id)}/deliveries`); }
  execHistory(id: string) { return this.json<{ execs: ExecRecord[] }>('GET', `/v1/sandboxes/${enc(id)}/execs`); }
  snapshot(id: string, name: string) { return this.json<Template>('POST', `/v1/sandboxes/${enc(id)}/snapshot`, { name }); }
  fork(id: string, count = 1) { return this.json<{ sandboxes: Sandbox[] }>('POST', `/v1/sandboxes/${enc(id)}/fork`, { count }); }
  deleteTemplate(name: string) { return this.json<void>('DELETE', `/v1/templates/${enc(name)}`); }
  secrets() { return this.json<{ secrets: Secret[] }>('GET', '/v1/secrets'); }
  putSecret(name: string, value: string) { return this.json<Secret>('PUT', `/v1/secrets/${enc(name)}`, { value }); }
  deleteSecret(name: string) { return this.json<void>('DELETE', `/v1/secrets/${enc(name)}`); }
  overview() { return this.json<Record<string, any>>('GET', '/v1/admin/overview'); }
}

function enc(s: string): string { return encodeURIComponent(s); }
