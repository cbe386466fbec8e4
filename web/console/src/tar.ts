// A minimal ustar writer: the build context the console uploads for a
// Dockerfile build (regular files only).

export interface TarFile { name: string; data: Uint8Array; mode?: number }

const enc = new TextEncoder();

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, '0') + '\0';
}

function header(name: string, size: number, mode: number, mtime: number): Uint8Array {
  const nameBytes = enc.encode(name);
  if (nameBytes.length > 100) throw new Error(`file name too long for the build context: ${name}`);
  if (name.startsWith('/') || name.split('/').includes('..')) throw new Error(`file name must stay inside the context: ${name}`);
  const h = new Uint8Array(512);
  h.set(nameBytes, 0);
  h.set(enc.encode(octal(mode, 8)), 100);
  h.set(enc.encode(octal(0, 8)), 108); // uid
  h.set(enc.encode(octal(0, 8)), 116); // gid
  h.set(enc.encode(octal(size, 12)), 124);
  h.set(enc.encode(octal(mtime, 12)), 136);
  h.set(enc.encode('        '), 148); // checksum placeholder: spaces
  h[156] = '0'.charCodeAt(0); // regular file
  h.set(enc.encode('ustar\0'), 257);
  h.set(enc.encode('00'), 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.set(enc.encode(sum.toString(8).padStart(6, '0') + '\0 '), 148);
  return h;
}

/** A tar archive of files, ending with the two zero blocks. */
export function tar(files: TarFile[], mtime = 0): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const f of files) {
    parts.push(header(f.name, f.data.length, f.mode ?? 0o644, mtime));
    parts.push(f.data);
    const pad = (512 - (f.data.length % 512)) % 512;
    if (pad) parts.push(new Uint8Array(pad));
  }
  parts.push(new Uint8Array(1024));
  const total = parts.reduce((n, p) => n + p.length, 0);
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) { out.set(p, off); off += p.length; }
  return out;
}
