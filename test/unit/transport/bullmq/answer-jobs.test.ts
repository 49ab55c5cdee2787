import { describe, expect, it } from 'vitest';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../../src/contracts/result-envelope.ts';
import { answerJobs, type Answer } from '../../../../src/transport/bullmq/answer-jobs.ts';

const settings = { repliesTemplate: '{model}.replies', dlqTemplate: '{model}.dlq' };
const result = { id: 'req-1', model: 'm', status: 'failed', error: { code: 'DEVICE_HANG', message: 'hung twice' }, timings: ZERO_TIMINGS } as unknown as ResultEnvelope;
const answer = (jobId: string | undefined, createdAt: number, queue = 'm'): Answer => ({
  model: 'm',
  result,
  json: {},
  dlq: { reason: 'DEVICE_HANG', message: 'hung twice' },
  source: { queue, jobId, data: { id: 'req-1' }, priority: 1, createdAt },
});
const dlqJobId = (a: Answer): unknown => answerJobs(settings, a).find((o) => o.queue === 'm.dlq')?.job.opts['jobId'];

describe('answerJobs: the DLQ record', () => {
  it('has one id per request job, so a redelivered answer (its job not completed the first time) does not dead-letter the request twice', () => {
    const first = dlqJobId(answer('req-1', 1000));
    expect(first).toEqual(expect.any(String));
    expect(dlqJobId(answer('req-1', 1000))).toBe(first);
    // A new job of that id (a replay of this very record, the id published again): a record of its own.
    expect(dlqJobId(answer('req-1', 2000))).not.toBe(first);
    expect(dlqJobId(answer('req-1', 1000, 'm.p2'))).not.toBe(first);
  });

  it('is an id BullMQ takes as a custom id: never an integer (auto ids of producers without jobId), never with a colon', () => {
    for (const id of [dlqJobId(answer('42', 1000)), dlqJobId(answer('a:b', 1000)), dlqJobId(answer('~x', 1000))]) {
      expect(typeof id === 'string' && `${Number.parseInt(id, 10)}` !== id && !id.includes(':')).toBe(true);
    }
  });
});
