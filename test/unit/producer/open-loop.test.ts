import { describe, expect, it } from 'vitest';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { runOpenLoop } from '../../../src/producer/open-loop.ts';

const req = (seq: number): RequestEnvelope => ({ id: `r${seq}`, model: 'm', createdAt: Date.now(), inputs: [] });
const ok = (r: RequestEnvelope): ResultEnvelope => ({ id: r.id, model: 'm', version: '1', status: 'ok', timings: ZERO_TIMINGS, batchSize: 1, gear: 1, device: 0, worker: 'w' });

describe('runOpenLoop', () => {
  it('sends at the rate whatever the replies do, numbering requests in order, and waits for the replies', async () => {
    const seqs: number[] = [];
    const answered: string[] = [];
    const publishes: number[] = [];
    const outcome = await runOpenLoop({
      producer: {
        requestMany: (requests) => {
          publishes.push(requests.length);
          // Replies after 100 ms: a closed loop would send far less in the time.
          return requests.map((r) => new Promise((resolve) => setTimeout(() => resolve(ok(r)), 100)));
        },
      },
      next: (seq) => (seqs.push(seq), req(seq)),
      ratePerSecond: 500,
      durationMs: 600,
      timeoutMs: 1000,
      maxOutstanding: 10_000,
      drainMs: 2000,
      onResult: (r) => void answered.push(r.id),
      onError: () => undefined,
    });
    expect(outcome).toEqual({ sent: 300, heldBack: 0, outstanding: 0 });
    expect(seqs).toEqual(Array.from({ length: 300 }, (_, i) => i));
    expect(answered).toHaveLength(300);
    // Ticks of 20 ms: about 10 requests each, never one publish for all.
    expect(publishes.length).toBeGreaterThan(15);
  });

  it('holds back past maxOutstanding (and says how many), and ends after drainMs with what is still out', async () => {
    const never: Array<() => void> = [];
    const errors: string[] = [];
    const outcome = await runOpenLoop({
      producer: { requestMany: (requests) => requests.map(() => new Promise<ResultEnvelope>((_, reject) => never.push(() => reject(new FleetError('CLOSED', 'closed'))))) },
      next: req,
      ratePerSecond: 1000,
      durationMs: 300,
      timeoutMs: 10_000,
      maxOutstanding: 50,
      drainMs: 100,
      onResult: () => undefined,
      onError: (e) => void errors.push(e.code),
    });
    expect(outcome.sent).toBe(50);
    expect(outcome.heldBack).toBe(250);
    expect(outcome.outstanding).toBe(50);
    for (const reject of never) reject();
    await new Promise((r) => setTimeout(r, 10));
    expect(errors).toHaveLength(50);
  });

  it('stops when told to (Ctrl-C) and reports a reply that never came as an error', async () => {
    let stop = false;
    const errors: string[] = [];
    setTimeout(() => (stop = true), 200);
    const outcome = await runOpenLoop({
      producer: { requestMany: (requests) => requests.map((r) => (r.id === 'r3' ? Promise.reject(new FleetError('TIMEOUT', 'no reply')) : Promise.resolve(ok(r)))) },
      next: req,
      ratePerSecond: 100,
      timeoutMs: 1000,
      maxOutstanding: 1000,
      drainMs: 1000,
      onResult: () => undefined,
      onError: (e) => void errors.push(e.code),
      stopped: () => stop,
    });
    expect(outcome.sent).toBeGreaterThanOrEqual(15);
    expect(outcome.sent).toBeLessThanOrEqual(60); // 200 ms at 100/s, plus a slow machine's late timers
    expect(errors).toEqual(['TIMEOUT']);
  });
});
