import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { Deque } from '../../../src/transport/memory/deque.ts';
import { MemoryBroker, type MemoryMessage } from '../../../src/transport/memory/memory-broker.ts';

const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
const text = (m: MemoryMessage): string => new TextDecoder().decode(m.body);
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('MemoryBroker', () => {
  it('delivers priority 0 first, FIFO within a priority, in one batch per burst', async () => {
    const b = new MemoryBroker();
    b.send('q', [
      { body: bytes('low1'), priority: 2 },
      { body: bytes('hi1'), priority: 0 },
      { body: bytes('low2'), priority: 2 },
      { body: bytes('hi2'), priority: 0 },
    ]);
    const batches: string[][] = [];
    b.consume('q', (ms) => batches.push(ms.map(text)));
    await tick();
    expect(batches).toEqual([['hi1', 'hi2', 'low1', 'low2']]);
  });

  it('holds at most prefetch unacked messages and continues after acks', async () => {
    const b = new MemoryBroker();
    b.send('q', Array.from({ length: 5 }, (_, i) => ({ body: bytes(`m${i}`) })));
    const got: MemoryMessage[] = [];
    const c = b.consume('q', (ms) => got.push(...ms), { prefetch: 2 });
    await tick();
    expect(got.map(text)).toEqual(['m0', 'm1']);
    expect(b.depth('q')).toBe(3);
    c.ack([got[0]?.id ?? '']);
    await tick();
    expect(got.map(text)).toEqual(['m0', 'm1', 'm2']);
  });

  it('redelivers unacked messages, in order and marked, when a consumer closes', async () => {
    const b = new MemoryBroker();
    b.send('q', [{ body: bytes('a') }, { body: bytes('b') }, { body: bytes('c') }]);
    const first: MemoryMessage[] = [];
    const c1 = b.consume('q', (ms) => first.push(...ms));
    await tick();
    c1.ack([first[1]?.id ?? '']);
    c1.close();
    const second: MemoryMessage[] = [];
    b.consume('q', (ms) => second.push(...ms));
    await tick();
    expect(second.map(text)).toEqual(['a', 'c']);
    expect(second.map((m) => m.deliveryCount)).toEqual([1, 1]);
  });

  it('paused priorities stay queued until resumed', async () => {
    const b = new MemoryBroker();
    const got: string[] = [];
    const c = b.consume('q', (ms) => got.push(...ms.map(text)), { autoAck: true });
    c.pause([1]);
    b.send('q', [{ body: bytes('p1'), priority: 1 }, { body: bytes('p0'), priority: 0 }]);
    await tick();
    expect(got).toEqual(['p0']);
    c.resume([1]);
    await tick();
    expect(got).toEqual(['p0', 'p1']);
  });

  it('shares a backlog between consumers', async () => {
    const b = new MemoryBroker();
    b.send('q', Array.from({ length: 10 }, (_, i) => ({ body: bytes(`m${i}`) })));
    const a: string[] = [];
    const c: string[] = [];
    b.consume('q', (ms) => a.push(...ms.map(text)), { prefetch: 5 });
    b.consume('q', (ms) => c.push(...ms.map(text)), { prefetch: 5 });
    await tick();
    expect(a).toHaveLength(5);
    expect(c).toHaveLength(5);
    expect([...a, ...c].sort()).toEqual(Array.from({ length: 10 }, (_, i) => `m${i}`).sort());
  });

  it('refuses illegal queue names and injected failures with FleetErrors', () => {
    const b = new MemoryBroker();
    expect(() => b.send('bad name!', [{ body: bytes('x') }])).toThrow(FleetError);
    b.failSends('q');
    try {
      b.send('q', [{ body: bytes('x') }]);
      expect.unreachable();
    } catch (err) {
      expect(FleetError.is(err, 'TRANSPORT_ERROR')).toBe(true);
    }
    b.failSends('q', false);
    b.send('q', [{ body: bytes('x') }]);
    expect(b.depth('q')).toBe(1);
  });
});

describe('Deque', () => {
  it('behaves like an array at both ends across growth', () => {
    const d = new Deque<number>();
    const ref: number[] = [];
    for (let i = 0; i < 200; i++) {
      if (i % 3 === 0) {
        d.unshift(i);
        ref.unshift(i);
      } else {
        d.push(i);
        ref.push(i);
      }
      if (i % 7 === 0) expect(d.shift()).toBe(ref.shift());
    }
    expect(d.length).toBe(ref.length);
    expect(d.toArray()).toEqual(ref);
  });
});
