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
