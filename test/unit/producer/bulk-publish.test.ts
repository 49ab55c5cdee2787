import { describe, expect, it } from 'vitest';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { BULK_CHUNK, bulkPublish, newBulkStats } from '../../../src/producer/bulk-publish.ts';
import { doneIds, DoneLines } from '../../../src/producer/done-lines.ts';
import type { Producer, RequestOptions } from '../../../src/producer/producer.ts';
import type { FileEntry } from '../../../src/producer/request-file.ts';

const req = (id: string): RequestEnvelope => ({ id, model: 'm', createdAt: 1, inputs: [] });
async function* entries(list: readonly FileEntry[]): AsyncGenerator<FileEntry> {
  for (const e of list) yield e;
}
const lines = (ids: readonly string[]): FileEntry[] => ids.map((id, i) => ({ line: i + 1, request: req(id) }));
const ok = (r: RequestEnvelope): ResultEnvelope => ({ id: r.id, model: r.model, version: '1', status: 'ok', timings: ZERO_TIMINGS, batchSize: 1, gear: 1, device: 0, worker: 'w' });
const tick = (): Promise<void> => new Promise((r) => setTimeout(r, Math.random() * 3));

/**
 * The producer side of bulkPublish, answering each request after a short random delay the way
 * `answer` says. Counts how many await a reply at once and what each publish call carried.
 */
function answeringProducer(answer: (r: RequestEnvelope) => ResultEnvelope | FleetError = ok): Pick<Producer, 'publish' | 'requestMany'> & { maxOutstanding: number; calls: number[]; published: string[] } {
  let outstanding = 0;
  const p = {
    maxOutstanding: 0,
    calls: [] as number[],
    published: [] as string[],
    async publish(requests: RequestEnvelope | readonly RequestEnvelope[]): Promise<void> {
      const list = Array.isArray(requests) ? requests : [requests as RequestEnvelope];
      p.calls.push(list.length);
      p.published.push(...list.map((r) => r.id));
    },
    requestMany(requests: readonly RequestEnvelope[], options?: RequestOptions): Array<Promise<ResultEnvelope>> {
      p.calls.push(requests.length);
      p.published.push(...requests.map((r) => r.id));
      outstanding += requests.length;
      p.maxOutstanding = Math.max(p.maxOutstanding, outstanding);
      // The broker has the publish unless it failed (an answer other than a reply or a TIMEOUT).
      const failed = requests.some((r) => {
        const a = answer(r);
        return a instanceof FleetError && a.code !== 'TIMEOUT';
      });
      if (!failed) queueMicrotask(() => options?.onPublished?.(requests.length));
      return requests.map(async (r) => {
        await tick();
        outstanding--;
        const a = answer(r);
        if (a instanceof FleetError) throw a;
        return a;
      });
    },
  };
  return p;
}

describe('bulkPublish', () => {
  it.each([
    [1, 50],
    [7, 100],
    [250, 1000],
    [1000, 2500],
  ])('with inFlight %i, never more than that await a reply, publishes go out in chunks, and every entry gets one record', async (inFlight, n) => {
    const ids = Array.from({ length: n }, (_, i) => `r${i}`);
    const producer = answeringProducer();
    const records: ResultEnvelope[] = [];
    const stats = await bulkPublish({ producer, entries: entries(lines(ids)), awaitReplies: true, timeoutMs: 1000, inFlight, onRecord: (r) => void records.push(r) });
    expect(producer.maxOutstanding).toBeLessThanOrEqual(inFlight);
    expect(Math.max(...producer.calls)).toBeLessThanOrEqual(Math.min(BULK_CHUNK, inFlight));
    expect(records.map((r) => r.id).sort()).toEqual([...ids].sort());
    expect(stats).toMatchObject({ read: n, published: n, unanswered: 0, invalidEntries: 0 });
    expect(stats.answered.ok).toBe(n);
  });

  it('a bad entry, a repeated id and a request prepare refuses each get an invalid record naming the line; the rest are sent', async () => {
    const list: FileEntry[] = [
      { line: 1, request: req('a') },
      { line: 2, error: new FleetError('INVALID_MESSAGE', 'line 2 is not JSON: x') },
      { line: 3, request: req('b') },
      { line: 4, request: req('a') },
      { line: 5, request: req('too-urgent') },
      { line: 6, error: new FleetError('INVALID_ARGUMENT', 'line 6: inputs[0].dtype ...'), id: 'f', model: 'm' },
    ];
    const producer = answeringProducer();
    const records: ResultEnvelope[] = [];
    const stats = await bulkPublish({
      producer,
      entries: entries(list),
      awaitReplies: true,
      timeoutMs: 1000,
      prepare: (r) => {
        if (r.id === 'too-urgent') throw new FleetError('INVALID_ARGUMENT', 'priority must be from 0 to 2', { details: { field: 'priority' } });
        r.priority = 1;
      },
      onRecord: (r) => void records.push(r),
    });
    expect(producer.published.sort()).toEqual(['a', 'b']);
    const invalid = records.filter((r) => r.status === 'invalid');
    expect(invalid.map((r) => [r.id, r.error?.message])).toEqual([
      ['', 'line 2 is not JSON: x'],
      // The record of a repeat carries its id (it was ""), its line telling it from the first.
      ['a', 'line 4: id "a" repeats line 1; ids must be unique in a run (replies are matched by id)'],
      ['too-urgent', 'line 5: priority must be from 0 to 2'],
      ['f', 'line 6: inputs[0].dtype ...'],
    ]);
    for (const r of invalid) expect(r).toMatchObject({ device: -1, version: '', worker: 'npu-fleet publish' });
    expect(stats).toMatchObject({ read: 6, published: 2, invalidEntries: 4 });
    expect(stats.answered.ok).toBe(2);
  });

  it("a JSON array's entries are items in their records, as the file reader names them, not lines", async () => {
    // The whole array may be one line: "line 3: id repeats line 1" beside "item 2: ..." from the reader.
    const list: FileEntry[] = [
      { line: 1, request: req('a') },
      { line: 2, request: req('too-urgent') },
      { line: 3, request: req('a') },
    ];
    const records: ResultEnvelope[] = [];
    await bulkPublish({
      producer: answeringProducer(),
      entries: entries(list),
      awaitReplies: true,
      timeoutMs: 1000,
      unit: 'item',
      prepare: (r) => {
        if (r.id === 'too-urgent') throw new FleetError('INVALID_ARGUMENT', 'priority must be from 0 to 2', { details: { field: 'priority' } });
      },
      onRecord: (r) => void records.push(r),
    });
    expect(records.filter((r) => r.status === 'invalid').map((r) => r.error?.message)).toEqual([
      'item 2: priority must be from 0 to 2',
      'item 3: id "a" repeats item 1; ids must be unique in a run (replies are matched by id)',
    ]);
  });

  it('resuming: ids already done are skipped, not sent', async () => {
    const producer = answeringProducer();
    const records: ResultEnvelope[] = [];
    const stats = await bulkPublish({ producer, entries: entries(lines(['a', 'b', 'c', 'd'])), awaitReplies: true, timeoutMs: 1000, done: doneIds(new Set(['b', 'd'])), onRecord: (r) => void records.push(r) });
    expect(producer.published.sort()).toEqual(['a', 'c']);
    expect(records.map((r) => r.id).sort()).toEqual(['a', 'c']);
    expect(stats.skipped).toBe(2);
  });

  it('resuming by line: the lines done are skipped whatever their id, each record names its line', async () => {
    const producer = answeringProducer();
    const records: Array<[string, number]> = [];
    const done = new DoneLines();
    done.add(2, 'b');
    done.add(4, 'd');
    const stats = await bulkPublish({ producer, entries: entries(lines(['a', 'b', 'c', 'd', 'e'])), awaitReplies: true, timeoutMs: 1000, done, onRecord: (r, line) => void records.push([r.id, line]) });
    expect(producer.published.sort()).toEqual(['a', 'c', 'e']);
    expect(records.sort()).toEqual([['a', 1], ['c', 3], ['e', 5]]);
    expect(stats.skipped).toBe(2);
  });

  it('a request with no reply in time gets a failed TIMEOUT record; results that are not ok are recorded as they are', async () => {
    const producer = answeringProducer((r) =>
      r.id === 'slow' ? new FleetError('TIMEOUT', 'no reply for request "slow" within 1000 ms') : r.id === 'late' ? { ...ok(r), status: 'expired' } : ok(r),
    );
    const records: ResultEnvelope[] = [];
    const stats = await bulkPublish({ producer, entries: entries(lines(['a', 'slow', 'late'])), awaitReplies: true, timeoutMs: 1000, onRecord: (r) => void records.push(r) });
    const byId = new Map(records.map((r) => [r.id, r]));
    expect(byId.get('slow')).toMatchObject({ status: 'failed', error: { code: 'TIMEOUT' } });
    expect(byId.get('late')?.status).toBe('expired');
    expect(stats).toMatchObject({ unanswered: 1, published: 3 });
    expect(stats.answered).toMatchObject({ ok: 1, expired: 1 });
  });

  it('a publish the broker refuses stops the run after the requests in flight: it throws, saying how far it got', async () => {
    const producer = answeringProducer((r) => (r.id.startsWith('x') ? new FleetError('TRANSPORT_ERROR', 'publishing requests failed: broker down') : ok(r)));
    const ids = [...Array.from({ length: 10 }, (_, i) => `a${i}`), ...Array.from({ length: 10 }, (_, i) => `x${i}`), ...Array.from({ length: 500 }, (_, i) => `b${i}`)];
    const records: ResultEnvelope[] = [];
    const stats = newBulkStats();
    const run = bulkPublish({ producer, entries: entries(lines(ids)), awaitReplies: true, timeoutMs: 1000, inFlight: 10, stats, onRecord: (r) => void records.push(r) });
    await expect(run).rejects.toThrow(/^publishing stopped after \d+ of \d+ requests read were published: publishing requests failed: broker down/);
    // Far fewer than all: reading stopped at the failure, and every request read has one record (those sent among them).
    expect(producer.published.length).toBeLessThan(60);
    expect(records.map((r) => r.id).sort()).toEqual(ids.slice(0, stats.read).sort());
    expect(producer.published.every((id) => records.some((r) => r.id === id))).toBe(true);
  });

  it('awaiting, with a producer that never connected: none is counted published', async () => {
    // It said "publishing stopped after 3 of 3 requests read were published" for a broker at 127.0.0.1:1.
    const producer = answeringProducer(() => new FleetError('TRANSPORT_ERROR', 'no broker of transport.kafka.brokers (127.0.0.1:1) answered'));
    const records: ResultEnvelope[] = [];
    const run = bulkPublish({ producer, entries: entries(lines(['r0', 'r1', 'r2'])), awaitReplies: true, timeoutMs: 1000, inFlight: 10, onRecord: (r) => void records.push(r) });
    await expect(run).rejects.toThrow(/^publishing stopped after 0 of 3 requests read were published: no broker/);
    expect(records.map((r) => r.status)).toEqual(['failed', 'failed', 'failed']);
  });

  it('a broker failing every publish: each line read gets exactly one record, those read but never sent too', async () => {
    // 1,000 got a failed record and the 200 read while waiting for room got none; a resumed run had
    // no record to go by for them.
    const producer = answeringProducer(() => new FleetError('TRANSPORT_ERROR', 'no broker of transport.kafka.brokers (127.0.0.1:1) answered'));
    const ids = Array.from({ length: 1200 }, (_, i) => `w${i}`);
    const records: Array<[ResultEnvelope, number]> = [];
    const stats = newBulkStats();
    const run = bulkPublish({ producer, entries: entries(lines(ids)), awaitReplies: true, timeoutMs: 1000, inFlight: 1000, stats, onRecord: (r, line) => void records.push([r, line]) });
    await expect(run).rejects.toThrow(/^publishing stopped after 0 of 1200 requests read were published: no broker/);
    expect(stats.read).toBe(1200);
    expect(records.length).toBe(stats.read);
    expect(new Set(records.map(([, line]) => line)).size).toBe(stats.read);
    expect(records.every(([r, line]) => r.status === 'failed' && r.id === `w${line - 1}` && r.error?.code === 'TRANSPORT_ERROR')).toBe(true);
    const unsent = records.filter(([r]) => !producer.published.includes(r.id));
    expect(unsent.length).toBe(200);
    expect(unsent[0]?.[0].error?.message).toMatch(/^not sent: publishing stopped on an earlier failure: no broker/);
    expect(stats.published).toBe(0);
  });

  it("a line the producer refuses in a chunk is recorded as that line's refusal, not as a whole publish sent nothing", async () => {
    // On Kafka a request over its topic's max.message.bytes refuses its publish, "...; nothing of
    // this publish was sent": said on the line's own record, it read as if the run had sent nothing.
    const refusal = (ids: readonly string[]): FleetError | undefined =>
      ids.includes('big')
        ? new FleetError('LIMIT_EXCEEDED', `message ${ids.indexOf('big')} of the publish is 2000000 bytes, over the topic's max.message.bytes 1048576; send fewer samples per request; the whole publish was refused`, {
            // The line's record is built from these, whatever the publish's message says.
            details: { field: 'inputs', index: ids.indexOf('big'), problem: "it is 2000000 bytes, over the topic's max.message.bytes 1048576; send fewer samples per request" },
          })
        : undefined;
    const base = answeringProducer();
    const producer = {
      ...base,
      requestMany(requests: readonly RequestEnvelope[], options: RequestOptions): Array<Promise<ResultEnvelope>> {
        const refused = refusal(requests.map((r) => r.id));
        return refused === undefined ? base.requestMany(requests, options) : requests.map(() => Promise.reject(refused));
      },
    };
    const ids = ['a', 'b', 'big', 'c'];
    const records: Array<[ResultEnvelope, number]> = [];
    await bulkPublish({ producer, entries: entries(lines(ids)), awaitReplies: true, timeoutMs: 1000, onRecord: (r, line) => void records.push([r, line]) });
    const big = records.find(([r]) => r.id === 'big');
    expect(big?.[1]).toBe(3);
    expect(big?.[0].status).toBe('invalid');
    expect(big?.[0].error?.message).toBe(
      `line 3: invalid request (id "big"): it is 2000000 bytes, over the topic's max.message.bytes 1048576; send fewer samples per request; this line was not sent (the others are)`,
    );
    expect(records.filter(([r]) => r.status === 'ok').map(([r]) => r.id).sort()).toEqual(['a', 'b', 'c']);
  });

  it('a broker gone mid-run: a request counts as published only once the broker has it, not when it was handed to the producer', async () => {
    // The progress line said every request read was "published" while the broker was away and the
    // publishes inside requestMany were still retrying (then timed out): requestMany gave no sign.
    let brokerUp = true;
    const sends: Array<{ ids: string[]; accepted: boolean }> = [];
    const producer: Pick<Producer, 'publish' | 'requestMany'> = {
      publish: async () => undefined,
      requestMany(requests, options) {
        const accepted = brokerUp;
        sends.push({ ids: requests.map((r) => r.id), accepted });
        if (accepted) setTimeout(() => options.onPublished?.(requests.length), 1);
        return requests.map(async (r) => {
          await new Promise((resolve) => setTimeout(resolve, 3));
          if (accepted) return ok(r);
          throw new FleetError('TIMEOUT', `no reply for request "${r.id}" within ${options.timeoutMs} ms`);
        });
      },
    };
    const stats = newBulkStats();
    const seenPublished: number[] = [];
    const ids = Array.from({ length: 50 }, (_, i) => `g${i}`);
    const records: ResultEnvelope[] = [];
    await bulkPublish({
      producer,
      entries: entries(lines(ids)),
      awaitReplies: true,
      timeoutMs: 1000,
      inFlight: 10,
      stats,
      onRecord: (r) => {
        records.push(r);
        seenPublished.push(stats.published);
        // The broker goes away once the first 20 are answered.
        if (stats.answered.ok === 20) brokerUp = false;
      },
    });
    expect(sends.filter((s) => s.accepted).flatMap((s) => s.ids)).toHaveLength(20);
    expect(stats).toMatchObject({ read: 50, published: 20, unanswered: 30 });
    expect(stats.answered.ok).toBe(20);
    expect(Math.max(...seenPublished)).toBe(20);
    expect(records.filter((r) => r.status === 'failed').every((r) => r.error?.code === 'TIMEOUT')).toBe(true);
  });

  it('a reply arriving before its publish is reported done counts the request published once, not twice', async () => {
    let published: ((count: number) => void) | undefined;
    const producer: Pick<Producer, 'publish' | 'requestMany'> = {
      publish: async () => undefined,
      requestMany(requests, options) {
        published = options.onPublished;
        return requests.map(async (r) => ok(r));
      },
    };
    const stats = newBulkStats();
    const run = bulkPublish({ producer, entries: entries(lines(['a', 'b'])), awaitReplies: true, timeoutMs: 1000, stats, onRecord: () => undefined });
    await run;
    expect(stats.published).toBe(2);
    published?.(2);
    expect(stats.published).toBe(2);
  });

  it('stopIfNoneAnswered: with no reply at all within the timeout, reading stops; what was sent gets its TIMEOUT record, what was read and not sent a failed one', async () => {
    // With no worker serving, a data set crawled through every line as TIMEOUT (exit 4 after ten minutes).
    const timeout = (r: RequestEnvelope): FleetError => new FleetError('TIMEOUT', `no reply for request "${r.id}" within 1000 ms`);
    const producer = answeringProducer(timeout);
    const ids = Array.from({ length: 5000 }, (_, i) => `t${i}`);
    const records: Array<[ResultEnvelope, number]> = [];
    const stats = newBulkStats();
    const run = bulkPublish({ producer, entries: entries(lines(ids)), awaitReplies: true, timeoutMs: 1000, inFlight: 400, stats, stopIfNoneAnswered: true, onRecord: (r, line) => void records.push([r, line]) });
    await expect(run).rejects.toMatchObject({ code: 'TIMEOUT', message: expect.stringMatching(/^no request was answered within 1000 ms \(--timeout-ms\): stopped after \d+ of the requests read were published/) as unknown });
    expect(stats.read).toBeLessThan(2000);
    expect(records.length).toBe(stats.read);
    expect(new Set(records.map(([, line]) => line)).size).toBe(stats.read);
    for (const [r] of records) expect(r.status).toBe('failed');
    const sent = new Set(producer.published);
    expect(records.filter(([r]) => sent.has(r.id)).every(([r]) => r.error?.code === 'TIMEOUT')).toBe(true);
    expect(records.filter(([r]) => !sent.has(r.id)).every(([r]) => /^not sent: /.test(r.error?.message ?? ''))).toBe(true);
  });

  it('stopIfNoneAnswered: once any reply came, timeouts after it do not stop the run', async () => {
    const producer = answeringProducer((r) => (r.id === 't0' ? ok(r) : new FleetError('TIMEOUT', 'no reply')));
    const ids = Array.from({ length: 50 }, (_, i) => `t${i}`);
    const records: ResultEnvelope[] = [];
    // inFlight 1: t0 is answered before anything else is sent.
    const stats = await bulkPublish({ producer, entries: entries(lines(ids)), awaitReplies: true, timeoutMs: 1000, inFlight: 1, stopIfNoneAnswered: true, onRecord: (r) => void records.push(r) });
    expect([stats.read, records.length, stats.answered.ok, stats.unanswered]).toEqual([50, 50, 1, 49]);
  });

  it('without awaiting: publishes in chunks and counts; a refused publish stops and throws', async () => {
    const producer = answeringProducer();
    const ids = Array.from({ length: 450 }, (_, i) => `p${i}`);
    const stats = await bulkPublish({ producer, entries: entries(lines(ids)), awaitReplies: false, timeoutMs: 1000, onRecord: () => undefined });
    expect(producer.calls).toEqual([BULK_CHUNK, BULK_CHUNK, 50]);
    expect(stats.published).toBe(450);
    const refusing = { ...answeringProducer(), publish: async (): Promise<void> => Promise.reject(new Error('connection refused')) };
    await expect(bulkPublish({ producer: refusing, entries: entries(lines(ids)), awaitReplies: false, timeoutMs: 1000, onRecord: () => undefined })).rejects.toThrow(
      /^publishing stopped after 0 of 200 requests read were published: connection refused/,
    );
  });

  it('a record that cannot be written (a full disk) stops the run and throws, with no stray rejection', async () => {
    const producer = answeringProducer();
    let written = 0;
    const run = bulkPublish({
      producer,
      entries: entries(lines(Array.from({ length: 2000 }, (_, i) => `w${i}`))),
      awaitReplies: true,
      timeoutMs: 1000,
      inFlight: 100,
      onRecord: async () => {
        if (++written > 150) throw new Error('ENOSPC: no space left on device');
      },
    });
    await expect(run).rejects.toThrow(/^stopped after \d+ entries read: recording a result failed: ENOSPC: no space left on device/);
    expect(producer.published.length).toBeLessThan(600);
  });

  it('stopped (Ctrl-C): reading ends; replies given up by close() are counted abandoned, not recorded', async () => {
    let stop = false;
    const pending: Array<(e: FleetError) => void> = [];
    const producer: Pick<Producer, 'publish' | 'requestMany'> = {
      publish: async () => undefined,
      requestMany: (requests, options) => {
        options.onPublished?.(requests.length);
        return requests.map(() => new Promise<ResultEnvelope>((_, reject) => pending.push(reject)));
      },
    };
    const records: ResultEnvelope[] = [];
    const run = bulkPublish({ producer, entries: entries(lines(Array.from({ length: 1000 }, (_, i) => `s${i}`))), awaitReplies: true, timeoutMs: 1000, inFlight: 300, stopped: () => stop, onRecord: (r) => void records.push(r) });
    // The first chunk goes out; the second waits for room, and must not go out once stopped.
    while (pending.length < BULK_CHUNK) await tick();
    await tick();
    stop = true;
    for (const reject of pending) reject(new FleetError('CLOSED', 'producer closed before the reply arrived'));
    const stats = await run;
    expect(records).toEqual([]);
    expect(stats).toMatchObject({ published: BULK_CHUNK, abandoned: BULK_CHUNK, unanswered: 0 });
    expect(pending).toHaveLength(BULK_CHUNK);
  });
});

describe('bulkPublish waiting for room', () => {
  it('costs the same per reply whatever --in-flight is (it grew with it: O(inFlight) reactions per settled reply)', { timeout: 120_000 }, async () => {
    // Replies in order after a fixed latency, as from a fleet at steady state.
    const producer: Pick<Producer, 'publish' | 'requestMany'> = {
      publish: async () => undefined,
      requestMany: (rs) => rs.map((r) => new Promise<ResultEnvelope>((resolve) => setTimeout(() => resolve(ok(r)), 5))),
    };
    const n = 20_000;
    const cpu = process.cpuUsage();
    let records = 0;
    const stats = await bulkPublish({ producer, entries: entries(lines(Array.from({ length: n }, (_, i) => `r${i}`))), awaitReplies: true, timeoutMs: 60_000, inFlight: 2_000, onRecord: () => void records++ });
    const used = process.cpuUsage(cpu);
    expect(stats.answered.ok).toBe(n);
    expect(records).toBe(n);
    // About 0.2 s of CPU now; Promise.race over the pending replies took ~20 s here.
    expect((used.user + used.system) / 1000).toBeLessThan(5_000);
  });
});
