import { describe, expect, it } from 'vitest';
import { bytes, layerSizes, cpuRates, duration, joinPath, listeningPorts, metadataQuery, parentPath, parsePairs, pushBounded, runTime, sparkPoints } from './format';

describe('duration', () => {
  it('formats each range', () => {
    expect(duration(42_000)).toBe('42s');
    expect(duration(303_000)).toBe('5m 03s');
    expect(duration(2 * 3600_000 + 10 * 60_000)).toBe('2h 10m');
    expect(duration(3 * 86400_000 + 4 * 3600_000)).toBe('3d 4h');
    expect(duration(-61_000)).toBe('-1m 01s');
    expect(duration(NaN)).toBe('—');
  });
});

describe('bytes', () => {
  it('picks the unit', () => {
    expect(bytes(512)).toBe('512 B');
    expect(bytes(1536)).toBe('1.5 KiB');
    expect(bytes(512 * 1024 * 1024)).toBe('512.0 MiB');
    expect(bytes(undefined)).toBe('—');
  });
});

describe('metadata filter', () => {
  it('parses pairs and encodes them as the list route wants', () => {
    const p = parsePairs(' team=ml, run = 42 ;\nowner=a=b ');
    expect(p).toEqual({ team: 'ml', run: '42', owner: 'a=b' });
    expect(metadataQuery(p)).toBe('team=ml&run=42&owner=a%3Db');
    expect(parsePairs('')).toEqual({});
  });
  it('names a bad pair', () => {
    expect(() => parsePairs('team')).toThrow('"team" is not key=value');
    expect(() => parsePairs('=x')).toThrow('"=x" is not key=value');
  });
});

describe('cpu and sparklines', () => {
  it('turns cpu seconds into cores', () => {
    const r = cpuRates([{ t: 0, cpuSeconds: 1, memoryBytes: 0 }, { t: 2000, cpuSeconds: 2, memoryBytes: 0 }, { t: 4000, cpuSeconds: 1.5, memoryBytes: 0 }]);
    expect(r).toEqual([0.5, 0]);
  });
  it('scales points into the box, y down', () => {
    expect(sparkPoints([0, 5, 10], 100, 20)).toBe('0,20 50,10 100,0');
    expect(sparkPoints([1], 80, 20, 2)).toBe('40,10');
    expect(sparkPoints([], 80, 20)).toBe('');
    expect(sparkPoints([0, 0], 80, 20)).toBe('0,20 80,20');
  });
  it('keeps a bounded history', () => {
    const l = [1, 2, 3];
    expect(pushBounded(l, 4, 3)).toEqual([2, 3, 4]);
  });
});

describe('listening ports', () => {
  it('reads LISTEN sockets from /proc/net/tcp', () => {
    const text = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2 1 0000000000000000 100 0 0 10 0
   2: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 3 1 0000000000000000 20 4 30 10 -1
   3: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 1000 0 4 1
`;
    expect(listeningPorts(text)).toEqual([3000, 8080]);
    expect(listeningPorts('')).toEqual([]);
  });
});

describe('paths', () => {
  it('joins and goes up', () => {
    expect(joinPath('/home/user', 'a.txt')).toBe('/home/user/a.txt');
    expect(joinPath('/', 'a')).toBe('/a');
    expect(joinPath('/x', '/abs')).toBe('/abs');
    expect(parentPath('/home/user/')).toBe('/home');
    expect(parentPath('/home')).toBe('/');
    expect(parentPath('/')).toBe('/');
  });
});

describe('layerSizes', () => {
  it('counts shared layers once', () => {
    const r = layerSizes([
      { name: 'a', tag: '1', layers: [{ diff_id: 'x', size: 100 }, { diff_id: 'y', size: 10 }] },
      { name: 'b', tag: '1', layers: [{ diff_id: 'x', size: 100 }, { diff_id: 'z', size: 5 }] },
    ]);
    expect(r.total).toBe(115);
    expect(r.own.get('a:1')).toBe(10);
    expect(r.own.get('b:1')).toBe(5);
  });
});

describe('runTime', () => {
  it('shows milliseconds, then seconds, then minutes', () => {
    expect(runTime(12.4)).toBe('12 ms');
    expect(runTime(1540)).toBe('1.5 s');
    expect(runTime(125000)).toBe(duration(125000));
    expect(runTime(NaN)).toBe('—');
  });
});
