import { describe, expect, it } from 'vitest';
import { encodeRequest } from '../../../src/codec/index.ts';
import { checkQuery, ListingBuilder, replayHeaders, replayTarget, ReplayTally, requestFacts, sourcePriority, type DeadLetter } from '../../../src/transport/dead-letters.ts';

const letter = (ref: string, reason: string, deadAt: number, deadlineAt?: number): DeadLetter => ({ ref, reason, message: '', source: 'm.requests.p1', priority: 1, requestId: ref, deadlineAt, deadAt, bytes: 10 });

describe('dead letters (pure parts)', () => {
  it.each([
    ['{model}.requests.p{priority}', 'm', 'm.requests.p0', 0],
    ['{model}.requests.p{priority}', 'm', 'm.requests.p15', 15],
    ['{model}.requests.p{priority}', 'm', 'm.requests.p16', null],
    ['{model}.requests.p{priority}', 'm', 'other.requests.p1', null],
    ['{model}.requests', 'm', 'm.requests', undefined],
    ['{model}.requests', 'm', 'm.replies', null],
  ])('sourcePriority(%s, %s, %s) = %s', (template, model, source, expected) => {
    expect(sourcePriority(template, model, source)).toBe(expected);
  });

  it('finds the request id and deadline in a valid message, the id in an invalid one that names it, nothing in garbage', () => {
    const valid = encodeRequest({ id: 'r-1', model: 'm', createdAt: 1, deadlineAt: 5000, inputs: [{ name: 'x', dtype: 'float32', shape: [1], data: new Uint8Array(4) }] }, 'json');
    expect(requestFacts(valid)).toEqual({ requestId: 'r-1', deadlineAt: 5000 });
    expect(requestFacts(Buffer.from(JSON.stringify({ id: 'r-2', model: 'm', inputs: 'nope' })))).toEqual({ requestId: 'r-2', deadlineAt: undefined });
    expect(requestFacts(new Uint8Array([0xde, 0xad]))).toEqual({ requestId: undefined, deadlineAt: undefined });
  });

  it('replay sends a record to its source at its priority, and skips one from a source not the model\'s, past its deadline, or without a priority where one is needed', () => {
    const o = { template: '{model}.requests.p{priority}', model: 'm', nowMs: 10_000, priorityRequired: true } as const;
    expect(replayTarget(letter('a', 'X', 1), o)).toEqual({ source: 'm.requests.p1', priority: 1 });
    expect(replayTarget({ ...letter('a', 'X', 1), source: 'n.requests.p1' }, o)).toEqual({ why: expect.stringMatching(/its source n\.requests\.p1 is not a request topic\/queue of m/) });
    expect(replayTarget(letter('a', 'X', 1, 10_000), o)).toEqual({ expired: true, why: expect.stringMatching(/its deadline passed at 1970-01-01T00:00:10\.000Z; .*--refresh-deadline.*dlq purge --expired/) });
    expect(replayTarget(letter('a', 'X', 1, 10_001), o)).toEqual({ source: 'm.requests.p1', priority: 1 });
    // A record without a priority: the one given, else skipped where the broker needs one.
    const none = { ...letter('a', 'X', 1), priority: undefined };
    expect(replayTarget(none, { ...o, priority: 2 })).toEqual({ source: 'm.requests.p1', priority: 2 });
    expect(replayTarget(none, o)).toEqual({ why: 'no priority recorded; give one (--priority)' });
    expect(replayTarget(none, { ...o, priorityRequired: false })).toEqual({ source: 'm.requests.p1', priority: undefined });
  });

  it('a re-sent message keeps the original headers, drops the DLQ ones and names the latest record it replays', () => {
    expect(replayHeaders({ a: '1', 'npu-fleet-dlq-reason': 'X', 'npu-fleet-replay-of': 'dlq/0/1', b: undefined }, 'dlq/0/7')).toEqual({ a: '1', 'npu-fleet-replay-of': 'dlq/0/7' });
  });

  it('a listing counts every record since sinceAt by reason and keeps the oldest matching ones up to the limit, whatever the read order', () => {
    const b = new ListingBuilder({ model: 'm', reasons: ['DEVICE_HANG'], sinceAt: 100, limit: 2 });
    for (const l of [letter('a', 'DEVICE_HANG', 50), letter('d', 'DEVICE_HANG', 400), letter('b', 'UNKNOWN_MODEL', 150), letter('c', 'DEVICE_HANG', 200), letter('e', 'DEVICE_HANG', 300)]) b.add(l);
    const listing = b.build();
    expect(listing.scanned).toBe(4);
    expect(listing.byReason).toEqual({ DEVICE_HANG: 3, UNKNOWN_MODEL: 1 });
    expect(listing.matched).toBe(3);
    expect(listing.letters.map((l) => l.ref)).toEqual(['c', 'e']);
  });

  it('a replay tally filters, stops at the limit and reports progress every N records read or re-sent', () => {
    const seen: number[] = [];
    const t = new ReplayTally({ model: 'm', reasons: ['X'], limit: 2, progressEvery: 2, onProgress: (p) => seen.push(p.scanned) });
    expect(t.read(letter('a', 'Y', 1))).toBe(false);
    expect(t.read(letter('b', 'X', 1))).toBe(true);
    t.progress();
    expect(t.stopsAtLimit(1)).toBe(false);
    expect(t.report().stoppedAtLimit).toBeUndefined();
    t.replayed = 2;
    expect(t.full).toBe(true);
    // A matching record read past the limit: the replay stops there, and its report says so.
    expect(t.stopsAtLimit()).toBe(true);
    expect(t.report().stoppedAtLimit).toBe(true);
    t.progress(true);
    expect(seen).toEqual([2, 2]);
    // Re-sending what was read (Kafka: a fetch batch, in chunks) reports too.
    const sent: number[] = [];
    const k = new ReplayTally({ model: 'm', progressEvery: 2, onProgress: (p) => sent.push(p.replayed) });
    for (const ref of ['a', 'b', 'c', 'd', 'e']) k.read(letter(ref, 'X', 1));
    k.progress();
    for (let i = 0; i < 5; i++) {
      k.replayed++;
      k.progress();
    }
    expect(sent).toEqual([0, 2, 4]);
    expect(t.report()).toEqual({ scanned: 2, matched: 0, replayed: 2, skipped: [], alreadyReplayed: 0, passedOver: [], refreshed: [], stoppedAtLimit: true });
    expect(k.report()).not.toHaveProperty('stoppedAtLimit');
  });

  it('checks the query before anything connects', () => {
    expect(() => checkQuery({ model: ' ' })).toThrow(/model is required/);
    expect(() => checkQuery({ model: 'm', limit: 0 })).toThrow(/limit must be an integer >= 1/);
    expect(() => checkQuery({ model: 'a:b' })).toThrow(/model must match/);
  });
});
