// Newline-delimited JSON from a streamed response body.

/** Splits chunks of text into complete lines, keeping a partial tail. */
export class LineSplitter {
  private tail = '';
  push(chunk: string): string[] {
    const text = this.tail + chunk;
    const lines = text.split('\n');
    this.tail = lines.pop() ?? '';
    return lines.filter((l) => l.trim() !== '');
  }
  end(): string[] {
    const t = this.tail.trim();
    this.tail = '';
    return t ? [t] : [];
  }
}

/** Calls onEvent for each JSON object of an NDJSON stream until it ends. */
export async function readNDJSON(body: ReadableStream<Uint8Array>, onEvent: (ev: Record<string, unknown>) => void): Promise<void> {
  const reader = body.getReader();
  const dec = new TextDecoder();
  const split = new LineSplitter();
  for (;;) {
    const { value, done } = await reader.read();
    const lines = done ? split.end() : split.push(dec.decode(value, { stream: true }));
    for (const line of lines) onEvent(JSON.parse(line) as Record<string, unknown>);
    if (done) return;
  }
}
