import { describe, expect, it } from 'vitest';
import { isRedisRefusal } from '../../../src/transport/bullmq/redis-refusal.ts';
import { ErrorThrottle } from '../../../src/transport/error-throttle.ts';

describe('ErrorThrottle', () => {
  it('lets one line through per period and reports how many it held back', () => {
    const t = new ErrorThrottle(10_000);
    const at = (ms: number) => t.note(ms);
    expect(at(0)).toEqual({ log: true, heldBack: 0 });
    expect(at(1)).toEqual({ log: false, heldBack: 0 });
    expect(at(9_999)).toEqual({ log: false, heldBack: 0 });
    expect(at(10_000)).toEqual({ log: true, heldBack: 2 });
    expect(at(25_000)).toEqual({ log: true, heldBack: 0 });
  });

  it('a Redis error answer is a refusal; a lost connection is not', () => {
    expect(isRedisRefusal(Object.assign(new Error("OOM command not allowed when used memory > 'maxmemory'"), { name: 'ReplyError' }))).toBe(true);
    expect(isRedisRefusal(new Error('connect ECONNREFUSED 127.0.0.1:6379'))).toBe(false);
  });
});
