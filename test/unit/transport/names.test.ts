import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { fromBullmqPriority, jobIdFor, redisConnection, toBullmqPriority } from '../../../src/transport/bullmq/bullmq-names.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';
import { renderName, replyToProblem, requestSources } from '../../../src/transport/names.ts';
import { replyEncodingFor } from '../../../src/transport/wire.ts';

describe('names', () => {
  it('renders templates and maps topics back to model and priority', () => {
    expect(renderName('{model}.requests.p{priority}', 'resnet.v2', 1)).toBe('resnet.v2.requests.p1');
    expect(() => renderName('{model}.p{priority}', 'm')).toThrow(FleetError);
    const s = requestSources('{model}.requests.p{priority}', [{ model: 'a.b', priorityLevels: 2 }]);
    expect([...s.values()]).toEqual([
      { name: 'a.b.requests.p0', model: 'a.b', priority: 0 },
      { name: 'a.b.requests.p1', model: 'a.b', priority: 1 },
    ]);
    expect([...requestSources('{model}.in', [{ model: 'm', priorityLevels: 3 }]).values()]).toEqual([
      { name: 'm.in', model: 'm', priority: undefined },
    ]);
  });

  it('maps request priority to BullMQ priority so every job is prioritized (1 = most urgent)', () => {
    expect(toBullmqPriority(0)).toBe(1);
    expect(fromBullmqPriority(toBullmqPriority(3))).toBe(3);
    expect(fromBullmqPriority(0)).toBeUndefined();
  });

  it('uses the request id as BullMQ job id unless BullMQ would refuse it; the mapping is one-to-one', () => {
    expect(jobIdFor('req-1')).toBe('req-1');
    expect(jobIdFor('042')).toBe('042');
    const odd = ['42', 'a:b', '~x', '~' + Buffer.from('42').toString('base64url')];
    const mapped = odd.map(jobIdFor);
    for (const m of mapped) {
      expect(m.includes(':')).toBe(false);
      expect(`${Number.parseInt(m, 10)}` === m).toBe(false);
    }
    expect(new Set(mapped).size).toBe(odd.length);
    expect(replyToProblem('bullmq', 'a.b-c')).toBeUndefined();
    expect(replyToProblem('bullmq', 'a:b')).toMatch(/not a legal BullMQ queue name/);
  });

  it('an unusable Redis URL is INVALID_CONFIG naming the setting and the form, never the password', () => {
    const err = fleetErrorOf(() => redisConnection('redis://:hunter2@cache:notaport', { lazyConnect: true }));
    expect(err.code).toBe('INVALID_CONFIG');
    expect(err.message).toMatch(/^transport\.bullmq\.redisUrl \(unparsable URL\) is not a usable Redis URL: .*; write it as redis:\/\/\[user:password@\]host:port\[\/db\] \(rediss:\/\/ for TLS\)$/);
    expect(err.message).not.toContain('hunter2');
  });

  it.each([
    ['kafka', 'replies.v2_x-y', true],
    ['kafka', 'a:b', false],
    ['kafka', '.', false],
    ['kafka', '..', false],
    ['kafka', '...', true],
    ['kafka', '', false],
    ['kafka', 'x'.repeat(249), true],
    ['kafka', 'x'.repeat(250), false],
    ['kafka', 'spaces are bad', false],
    ['bullmq', 'spaces are fine', true],
    ['bullmq', 'a:b', false],
    ['bullmq', '', false],
    ['memory', 'it.replies', true],
    ['memory', 'a/b', false],
  ] as const)('replyToProblem(%s, %j) allows it: %s', (kind, name, ok) => {
    const problem = replyToProblem(kind, name);
    if (ok) expect(problem).toBeUndefined();
    else expect(problem).toMatch(/is not a legal .* name \(/);
  });

  it('answers in the encoding the request came in', () => {
    expect(replyEncodingFor(new TextEncoder().encode('  {"id":1}'))).toBe('json');
    expect(replyEncodingFor(new Uint8Array([0x4e, 0x50, 0x55, 0x46, 1]))).toBe('binary');
    expect(replyEncodingFor(new Uint8Array([0xde, 0xad]))).toBe('binary');
    expect(replyEncodingFor({ id: 'x' })).toBe('json');
  });
});

describe('chunkByBytes', () => {
  it('keeps order and keeps every chunk under the byte budget (a single oversize message gets its own chunk)', async () => {
    const { chunkByBytes } = await import('../../../src/transport/kafka/kafka-outcomes.ts');
    const msgs = [100, 300, 300, 50, 2_000, 10].map((n, i) => ({ i, message: { value: Buffer.alloc(n) } }));
    const chunks = chunkByBytes(msgs, 700);
    expect(chunks.flat().map((m) => m.i)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(chunks.map((c) => c.map((m) => m.i))).toEqual([[0, 1], [2, 3], [4], [5]]);
  });
});
