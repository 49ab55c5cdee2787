import { afterEach, describe, expect, it, vi } from 'vitest';
import { poppedJobId, ReplyPopOrder } from '../../../src/producer/reply-pop-order.ts';

afterEach(() => {
  vi.useRealTimers();
});

describe('poppedJobId', () => {
  it('reads the job id of a moveToActive / moveToFinished reply that handed a job over', () => {
    expect(poppedJobId([['name', 'result', 'data', '{}'], 'r1@5', 0, 0])).toBe('r1@5');
    expect(poppedJobId([['name', 'result'], Buffer.from('r2'), 0, 0])).toBe('r2');
  });

  it('takes nothing else for a pop', () => {
    expect(poppedJobId(0)).toBeUndefined();
    expect(poppedJobId([])).toBeUndefined();
    expect(poppedJobId([0, 0, 100, 0])).toBeUndefined(); // no job: rate limited or empty
    expect(poppedJobId([['a'], 'x'])).toBeUndefined(); // not a hash
    expect(poppedJobId([['j1', 'j2'], ['j3']])).toBeUndefined(); // moveStalledJobsToWait: two id lists
  });
});

describe('ReplyPopOrder', () => {
  it('hands jobs over in pop order whatever order they reach it in', async () => {
    const order = new ReplyPopOrder();
    for (const id of ['a', 'b', 'c', 'd']) order.pop(id);
    const got: string[] = [];
    const done = ['c', 'a', 'd', 'b'].map((id) => order.handOver(id, () => got.push(id)));
    expect(got).toEqual(['a', 'b', 'c', 'd']);
    await Promise.all(done);
    expect(order.waiting).toBe(0);
  });

  it('hands a job whose pop it did not see over at once', async () => {
    const order = new ReplyPopOrder();
    order.pop('a');
    const got: string[] = [];
    await order.handOver('unseen', () => got.push('unseen'));
    await order.handOver(undefined, () => got.push('no id'));
    expect(got).toEqual(['unseen', 'no id']);
    expect(order.waiting).toBe(0);
  });

  it('a job popped twice (taken again after its lock lapsed) is handed over at each of its pops', () => {
    const order = new ReplyPopOrder();
    order.pop('a');
    order.pop('b');
    order.pop('a');
    const got: string[] = [];
    void order.handOver('a', () => got.push('a1'));
    void order.handOver('a', () => got.push('a2'));
    expect(got).toEqual(['a1']);
    void order.handOver('b', () => got.push('b'));
    expect(got).toEqual(['a1', 'b', 'a2']);
  });

  it('gives up on a popped job that never comes after the gap time, once, and goes on in order', async () => {
    vi.useFakeTimers();
    const skipped: number[] = [];
    const order = new ReplyPopOrder((n) => skipped.push(n), 1_000);
    for (const id of ['lost', 'b', 'c']) order.pop(id);
    const got: string[] = [];
    void order.handOver('c', () => got.push('c'));
    await vi.advanceTimersByTimeAsync(600);
    // A later arrival behind the same gap does not put the give-up off.
    void order.handOver('b', () => got.push('b'));
    expect(got).toEqual([]);
    await vi.advanceTimersByTimeAsync(400);
    expect(got).toEqual(['b', 'c']);
    expect(skipped).toEqual([1]);
    expect(order.skipped).toBe(1);
    // The lost one turning up after all is handed over at once, not held.
    await order.handOver('lost', () => got.push('lost'));
    expect(got).toEqual(['b', 'c', 'lost']);
  });

  it('a handover that throws rejects its own promise only', async () => {
    const order = new ReplyPopOrder();
    order.pop('a');
    order.pop('b');
    const got: string[] = [];
    const b = order.handOver('b', () => got.push('b'));
    const a = order.handOver('a', () => {
      throw new Error('callback failed');
    });
    await expect(a).rejects.toThrow('callback failed');
    await expect(b).resolves.toBeUndefined();
    expect(got).toEqual(['b']);
  });
});
