import { describe, expect, it } from 'vitest';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { LatencyHistogram, outcomeOf, RunStats } from '../../../src/producer/run-stats.ts';

const result = (extra: Partial<ResultEnvelope>, totalMs = 5): ResultEnvelope => ({
  id: 'r',
  model: 'm',
  version: '1',
  status: 'ok',
  timings: { ...ZERO_TIMINGS, totalMs },
  batchSize: 3,
  gear: 4,
  device: 0,
  worker: 'w',
  ...extra,
});

describe('LatencyHistogram', () => {
  it('percentiles within 1 % of the exact ones, over a wide range, in fixed memory', () => {
    const h = new LatencyHistogram();
    const values: number[] = [];
    let s = 7;
    for (let i = 0; i < 20_000; i++) {
      s = (s * 1103515245 + 12345) >>> 0;
      const v = 0.05 * Math.exp((s / 2 ** 32) * Math.log(200_000)); // 0.05 ms .. 10 s, log-uniform
      values.push(v);
      h.add(v);
    }
    values.sort((a, b) => a - b);
    for (const p of [0.01, 0.5, 0.9, 0.99, 0.999, 1]) {
      const exact = values[Math.max(0, Math.ceil(p * values.length) - 1)] as number;
      const got = h.percentile(p);
      expect(got / exact, `p${p}`).toBeGreaterThanOrEqual(1);
      expect(got / exact, `p${p}`).toBeLessThanOrEqual(1.01);
    }
    expect(new LatencyHistogram().percentile(0.5)).toBe(0);
  });
});

describe('RunStats', () => {
  it('counts outcomes (late and superseded apart), ok latency only, and resets each interval', () => {
    expect(outcomeOf(result({ late: true }))).toBe('late');
    expect(outcomeOf(result({ status: 'rejected', error: { code: 'SUPERSEDED', message: 'newer frame' } }))).toBe('superseded');
    expect(outcomeOf(result({ status: 'rejected', error: { code: 'QUEUE_FULL', message: 'full' } }))).toBe('rejected');
    const s = new RunStats();
    s.result(result({}, 10));
    s.result(result({}, 20));
    s.result(result({ status: 'expired' }, 900));
    s.result(result({ status: 'rejected', error: { code: 'SUPERSEDED', message: '' } }, 1));
    s.noReply(new FleetError('TIMEOUT', 'no reply'));
    const line = s.line(1000, 7);
    // A request that timed out was not answered: counting it showed a fleet answering nothing as answering.
    expect(line).toMatch(/^sent 7\/s \| answered 4\/s \| ok p50 10\.\d ms p99 20\.\d ms \| batch fill 75% \| ok 2 expired 1 superseded 1 no reply 1$/);
    // Nothing ok in the interval: no latency to show, and 0.0 ms would read as an instant answer.
    expect(s.line(1000, 0)).toMatch(/answered 0\/s \| ok p50 - p99 - \| .*\| no replies$/);
    expect(s.summary()).toMatch(/^ok 2 expired 1 superseded 1 no reply 1 \| ok latency p50 10\.\d ms, p95 20\.\d ms, p99 20\.\d ms, max 20\.\d ms$/);
  });

  it("an interval other than a second shows counts over its span, so answered adds up to the outcomes beside it", () => {
    const s = new RunStats();
    s.result(result({}, 10));
    s.result(result({ status: 'expired' }, 900));
    s.noReply(new FleetError('TIMEOUT', 'no reply'));
    s.heldBack(5);
    // The last, part-second line of a run: scaled to per second, "answered 5/s" stood beside "ok 1 expired 1".
    expect(s.line(400, 3)).toMatch(/^sent 3 in 0\.4 s, held back 5 in 0\.4 s \| answered 2 in 0\.4 s \| .* \| ok 1 expired 1 no reply 1$/);
    // The part-second left when a run ends right after a whole one: not "in 0.0 s".
    s.result(result({}, 10));
    expect(s.line(30, 0)).toMatch(/^sent 0 in 30 ms \| answered 1 in 30 ms \| /);
    // A tick a little late is still a second's line: its counts, not a rate rescaled by 1.03.
    s.result(result({}, 10));
    expect(s.line(1_030, 31)).toMatch(/^sent 31\/s \| answered 1\/s \| /);
  });

  it('a run with nothing ok says so instead of a latency of 0.0 ms', () => {
    const s = new RunStats();
    s.result(result({ status: 'expired' }, 900));
    expect(s.line(1000, 1)).toMatch(/\| ok p50 - p99 - \|/);
    expect(s.summary()).toBe('expired 1 | ok latency -: nothing ok');
  });

  it('batch fill is real rows over gear rows per batch, not a per-result average big batches inflate', () => {
    const s = new RunStats();
    // A full gear-8 batch of 8 one-row requests, and a gear-8 batch holding one request: 9 of 16 rows.
    for (let i = 0; i < 8; i++) s.result(result({ batchSize: 8, gear: 8 }));
    s.result(result({ batchSize: 1, gear: 8 }));
    expect(s.line(1000, 9)).toMatch(/batch fill 56%/);
    // A 3-row request alone in a gear-4 batch: 3 of 4.
    const rows3 = { name: 'probs', dtype: 'float32' as const, shape: [3, 10], data: new Uint8Array(120) };
    s.result(result({ batchSize: 3, gear: 4, outputs: [rows3] }));
    expect(s.line(1000, 1)).toMatch(/batch fill 75%/);
  });
});
