import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { ReplyRouter } from '../../../src/producer/reply-router.ts';

const slowPublish = (ms: number) => (): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('ReplyRouter.roundTrip', () => {
  // Node ends the process on an unhandled rejection (the default --unhandled-rejections=throw).
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });
  afterEach(() => {
    process.off('unhandledRejection', onUnhandled);
  });

  it('a timeout that fires while the publish is still under way rejects the call, not the process', async () => {
    const router = new ReplyRouter();
    const err = await router.roundTrip('slow', 10, slowPublish(100)).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((err as FleetError).code).toBe('TIMEOUT');
    expect(unhandled).toEqual([]);
  });

  it('a publish that never settles (a broker that took the connection and went silent) does not hold the call past its timeout', async () => {
    const router = new ReplyRouter();
    const startedAt = Date.now();
    const outcome = await Promise.race([
      router.roundTrip('hung', 20, () => new Promise<void>(() => undefined)).catch((e: unknown) => e),
      new Promise((r) => setTimeout(() => r('still waiting'), 1_000)),
    ]);
    expect((outcome as FleetError).code).toBe('TIMEOUT');
    expect(Date.now() - startedAt).toBeLessThan(500);
    expect(router.waiting).toBe(0);
  });

  it('a requestMany refused as a whole (a bad timeoutMs) leaves no unhandled rejection when the caller awaits only one', async () => {
    const router = new ReplyRouter();
    const [first] = router.roundTripMany(['a', 'b', 'c'], Number.NaN, async () => undefined);
    expect(((await (first as Promise<unknown>).catch((e: unknown) => e)) as FleetError).code).toBe('INVALID_ARGUMENT');
    await new Promise((r) => setTimeout(r, 20));
    expect(unhandled).toEqual([]);
  });

  it('an id already awaiting its reply is refused without an unhandled rejection (and without publishing)', async () => {
    const router = new ReplyRouter();
    const first = router.roundTrip('dup', 1_000, slowPublish(10));
    let published = 0;
    const err = await router
      .roundTrip('dup', 1_000, async () => {
        published++;
        await slowPublish(50)();
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect((err as FleetError).code).toBe('INVALID_ARGUMENT');
    expect(published).toBe(0);
    expect(unhandled).toEqual([]);
    router.deliver({ id: 'dup' } as never);
    await first;
  });
});

describe('ReplyRouter timeoutMs', () => {
  const settled = async (p: Promise<unknown>, withinMs: number): Promise<unknown> =>
    Promise.race([p.then((v) => ({ value: v }), (e: unknown) => ({ error: e })), new Promise((r) => setTimeout(() => r('pending'), withinMs))]);

  it('a timeout past setTimeout\'s ceiling (or Infinity: no limit) waits, where Node fired it after 1 ms', async () => {
    const router = new ReplyRouter();
    for (const timeoutMs of [3_000_000_000, Infinity]) {
      const id = `long-${timeoutMs}`;
      const reply = router.roundTrip(id, timeoutMs, async () => undefined);
      expect(await settled(reply, 50), String(timeoutMs)).toBe('pending');
      router.deliver({ id } as never);
      expect(await reply).toEqual({ id });
      const [many] = router.roundTripMany([`${id}-many`], timeoutMs, async () => undefined);
      expect(await settled(many as Promise<unknown>, 50), String(timeoutMs)).toBe('pending');
      router.deliver({ id: `${id}-many` } as never);
      await many;
    }
  });

  it('NaN, 0 or a negative timeoutMs is refused naming the field, and nothing is published', async () => {
    const router = new ReplyRouter();
    let published = 0;
    const publish = async (): Promise<void> => void published++;
    for (const timeoutMs of [Number.NaN, 0, -5]) {
      const err = (await router.roundTrip('x', timeoutMs, publish).catch((e: unknown) => e)) as FleetError;
      expect(err.code, String(timeoutMs)).toBe('INVALID_ARGUMENT');
      expect(err.message).toMatch(/^timeoutMs must be a positive number of milliseconds/);
      expect(err.details).toMatchObject({ field: 'timeoutMs' });
      const many = router.roundTripMany(['y', 'z'], timeoutMs, publish);
      const errs = (await Promise.all(many.map((p) => p.catch((e: unknown) => e)))) as FleetError[];
      expect(errs.map((e) => e.code)).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
    }
    expect(published).toBe(0);
    expect(router.waiting).toBe(0);
  });
});
