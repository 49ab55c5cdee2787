import { describe, expect, it } from 'vitest';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { DemoStats } from '../../../src/runtime/demo-load.ts';

/** An ok result of a request with `samples` rows, served in a batch of `batchSize` real rows padded to `gear`. */
function served(id: string, samples: number, batchSize: number, gear: number, totalMs = 5): ResultEnvelope {
  return {
    id,
    model: 'm',
    version: '1',
    status: 'ok',
    timings: { queuedMs: 0, batchWaitMs: 0, deviceMs: 1, totalMs },
    batchSize,
    gear,
    device: 0,
    worker: 'w',
    outputs: [{ name: 'y', dtype: 'float32', shape: [samples, 2], data: new Uint8Array(samples * 8) }],
  };
}

const fillOf = (line: string): number => Number(/batch fill (\d+)%/.exec(line)?.[1]);

describe('DemoStats (the npm start progress line)', () => {
  it('batch fill is real rows over gear rows of the batches, as npu_fleet_padded_items_total says, not a per-request average', () => {
    const stats = new DemoStats();
    // One full batch: 8 one-row requests at gear 8. One nearly empty batch: 1 row at gear 8.
    for (let i = 0; i < 8; i++) stats.add(served(`full${i}`, 1, 8, 8));
    stats.add(served('alone', 1, 1, 8));
    // 9 real rows in 16 slots (7 padding rows): 56 %. Averaging per request gave 90 %.
    expect(fillOf(stats.line(1000))).toBe(56);
  });

  it('weights requests by their rows: a 4-row and a 1-row request sharing a gear-8 batch count as one batch of 5 in 8', () => {
    const stats = new DemoStats();
    stats.add(served('big', 4, 5, 8));
    stats.add(served('small', 1, 5, 8));
    stats.add(served('other', 2, 2, 2));
    // Batches: 5 of 8 and 2 of 2 rows: 7 of 10.
    expect(fillOf(stats.line(1000))).toBe(70);
    // The next interval starts empty.
    expect(fillOf(stats.line(1000))).toBe(0);
  });
});

describe('DemoStats throughput and latency', () => {
  it('counts served requests only: expired and rejected answers are neither throughput nor latency', () => {
    const stats = new DemoStats();
    for (let i = 0; i < 10; i++) stats.add(served(`ok${i}`, 1, 1, 1, 5));
    // A fleet past its capacity answers most requests expired, each after waiting out its deadline.
    for (let i = 0; i < 90; i++) stats.add({ ...served(`x${i}`, 1, 1, 1, 400), status: 'expired', gear: 0, batchSize: 0, device: -1 });
    // Counted, not shown: the line left invalid answers out of "every outcome counted".
    for (let i = 0; i < 3; i++) stats.add({ ...served(`bad${i}`, 1, 1, 1, 0), status: 'invalid', gear: 0, batchSize: 0, device: -1 });
    const line = stats.line(1000);
    // Counting them gave 'throughput 100 req/s | p50 400.0 ms | p99 400.0 ms': a fleet dropping
    // nine requests in ten looked like it served 100 req/s, with the latency of the dropped ones.
    expect(line).toMatch(/^throughput 10 req\/s \| p50 5\.0 ms \| p99 5\.0 ms \| batch fill 100% \| ok 10 late 0 expired 90 rejected 0 invalid 3 failed 0$/);
  });
});
