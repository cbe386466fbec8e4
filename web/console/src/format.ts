// Pure helpers: formatting, parsing and small computations the views use.

/** Human duration of ms milliseconds: "42s", "5m 03s", "2h 10m", "3d 4h". */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  const neg = ms < 0;
  let s = Math.floor(Math.abs(ms) / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  let out: string;
  if (d > 0) out = `${d}d ${h}h`;
  else if (h > 0) out = `${h}h ${m}m`;
  else if (m > 0) out = `${m}m ${String(s).padStart(2, '0')}s`;
  else out = `${s}s`;
  return neg ? `-${out}` : out;
}

/** Bytes as B, KiB, MiB, GiB, TiB with one decimal above KiB. */
export function bytes(n: number | undefined | null): string {
  if (n == null || !Number.isFinite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n, i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

/**
 * Parses a metadata filter typed as "k=v, k2=v2" (commas, semicolons or
 * new lines between pairs) into pairs. Throws on a pair without "=" or an
 * empty key, naming it.
 */
export function parsePairs(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split(/[,;\n]/)) {
    const part = raw.trim();
    if (!part) continue;
    const eq = part.indexOf('=');
    if (eq <= 0) throw new Error(`"${part}" is not key=value`);
    out[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  return out;
}

/** The list route's metadata query value: URL-encoded k=v&k2=v2. */
export function metadataQuery(pairs: Record<string, string>): string {
  return new URLSearchParams(pairs).toString();
}

/** A stats sample the console keeps per sandbox. */
export interface Sample { t: number; cpuSeconds: number; memoryBytes: number }

/** CPU use in cores between consecutive samples (first point dropped). */
export function cpuRates(samples: Sample[]): number[] {
  const out: number[] = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    const dc = samples[i].cpuSeconds - samples[i - 1].cpuSeconds;
    out.push(dt > 0 && dc >= 0 ? dc / dt : 0);
  }
  return out;
}

/**
 * SVG polyline points for values in a width×height box, y growing down,
 * scaled to max (at least the largest value; 0 values sit on the bottom).
 */
export function sparkPoints(values: number[], width: number, height: number, max?: number): string {
  if (values.length === 0) return '';
  const top = Math.max(max ?? 0, ...values, Number.EPSILON);
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  return values
    .map((v, i) => {
      const x = values.length > 1 ? i * step : width / 2;
      const y = height - (Math.max(0, v) / top) * height;
      return `${round(x)},${round(y)}`;
    })
    .join(' ');
}

function round(n: number): number { return Math.round(n * 10) / 10; }

/** Appends to a bounded history, dropping the oldest. */
export function pushBounded<T>(list: T[], item: T, max: number): T[] {
  list.push(item);
  if (list.length > max) list.splice(0, list.length - max);
  return list;
}

/**
 * Ports listening on TCP from the text of /proc/net/tcp or tcp6 (state 0A),
 * sorted and without duplicates.
 */
export function listeningPorts(procNetTcp: string): number[] {
  const ports = new Set<number>();
  for (const line of procNetTcp.split('\n').slice(1)) {
    const cols = line.trim().split(/\s+/);
    if (cols.length < 4 || cols[3] !== '0A') continue;
    const local = cols[1];
    const hex = local.slice(local.lastIndexOf(':') + 1);
    const port = parseInt(hex, 16);
    if (port > 0 && port < 65536) ports.add(port);
  }
  return [...ports].sort((a, b) => a - b);
}

/** Joins a directory and a name into a sandbox path. */
export function joinPath(dir: string, name: string): string {
  if (name.startsWith('/')) return name;
  return (dir.endsWith('/') ? dir : dir + '/') + name;
}

/** The parent of a sandbox path ("/" stays "/"). */
export function parentPath(p: string): string {
  const trimmed = p.replace(/\/+$/, '');
  const i = trimmed.lastIndexOf('/');
  return i <= 0 ? '/' : trimmed.slice(0, i);
}

/**
 * Sizes of templates that share layers: every distinct layer counted once
 * in total, and per template the bytes of the layers no other template has.
 */
export function layerSizes(templates: { name: string; tag?: string; layers?: { diff_id?: string; size?: number }[] }[]): { total: number; own: Map<string, number> } {
  const users = new Map<string, { size: number; n: number }>();
  for (const t of templates) {
    for (const l of new Map((t.layers ?? []).map((x) => [x.diff_id ?? '', x])).values()) {
      if (!l.diff_id) continue;
      const u = users.get(l.diff_id) ?? { size: l.size ?? 0, n: 0 };
      u.n++;
      users.set(l.diff_id, u);
    }
  }
  let total = 0;
  for (const u of users.values()) total += u.size;
  const own = new Map<string, number>();
  for (const t of templates) {
    let b = 0;
    for (const l of new Map((t.layers ?? []).map((x) => [x.diff_id ?? '', x])).values()) if (l.diff_id && users.get(l.diff_id)!.n === 1) b += l.size ?? 0;
    own.set(`${t.name}:${t.tag ?? ''}`, b);
  }
  return { total, own };
}

/** A command's run time: milliseconds under a second, then seconds with a tenth, then minutes. */
export function runTime(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return duration(ms);
}
