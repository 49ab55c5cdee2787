import { describe, expect, it } from 'vitest';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { ReplyRouter } from '../../../src/producer/reply-router.ts';

const result = (id: string): ResultEnvelope => ({
  id,
  model: 'm',
  version: '1',
  status: 'ok',
  timings: ZERO_TIMINGS,
  batchSize: 1,
  gear: 1,
  device: 0,
  worker: 'w',
});

describe('ReplyRouter', () => {
  it('resolves the waiter of the matching id and counts unmatched replies', async () => {
    const r = new ReplyRouter();
    const p = r.expect('a', 1_000);
    r.deliver(result('b'));
    r.deliver(result('a'));
    r.deliver(result('a'));
    expect((await p).id).toBe('a');
    expect(r.unmatched).toBe(2);
    expect(r.waiting).toBe(0);
  });

  it('times out with TIMEOUT, refuses duplicate ids, fails all on close', async () => {
    const r = new ReplyRouter();
    const t = await r.expect('slow', 10).catch((e: unknown) => e);
    expect(FleetError.is(t, 'TIMEOUT')).toBe(true);
    const first = r.expect('x', 1_000);
    const dup = await r.expect('x', 1_000).catch((e: unknown) => e);
    expect(FleetError.is(dup, 'INVALID_ARGUMENT')).toBe(true);
    r.failAll(new FleetError('CLOSED', 'bye'));
    expect(FleetError.is(await first.catch((e: unknown) => e), 'CLOSED')).toBe(true);
  });
});
