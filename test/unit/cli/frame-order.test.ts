import { describe, expect, it } from 'vitest';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FrameOrder } from '../../../src/cli/frame-order.ts';

const request = (cam: string, createdAt: number): RequestEnvelope => ({ id: `${cam}-${createdAt}`, model: 'm', streamKey: cam, createdAt, inputs: [] });
const result = (status: ResultEnvelope['status']): ResultEnvelope => ({ status }) as ResultEnvelope;

describe('FrameOrder', () => {
  it('counts ok results older than an ok result of their camera seen before, per interval and in total', () => {
    const o = new FrameOrder();
    o.result(result('ok'), request('a', 2));
    o.result(result('ok'), request('a', 1));
    o.result(result('ok'), request('b', 1));
    expect(o.line()).toBe(' | out of order 1');
    expect(o.line()).toBe('');
    o.result(result('ok'), request('a', 3));
    o.result(result('ok'), request('a', 2));
    o.result(result('ok'), request('b', 0));
    expect(o.line()).toBe(' | out of order 2');
    expect(o.summary()).toBe(' | out of order 3');
  });

  it('leaves out answers that show nothing (superseded, expired, failed) and requests without a stream', () => {
    const o = new FrameOrder();
    o.result(result('ok'), request('a', 5));
    o.result(result('rejected'), request('a', 4));
    o.result(result('expired'), request('a', 3));
    o.result(result('failed'), request('a', 2));
    o.result(result('ok'), { ...request('a', 1), streamKey: undefined });
    // A newer frame answered after an older one's rejection is in order.
    o.result(result('rejected'), request('a', 9));
    o.result(result('ok'), request('a', 6));
    expect(o.summary()).toBe(' | out of order 0');
  });
});
