// The one transport conformance suite (issue 5 item 1): the same tests, unchanged, against the
// memory broker, Kafka and BullMQ on real servers. A harness supplies the broker-specific parts.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import type { Producer } from '../../../src/producer/producer.ts';
import type { Delivery, Transport } from '../../../src/transport/transport.ts';
import {
  type ConformanceHarness,
  decodeBody,
  idOf,
  Inbox,
  makeRequest,
  outcomeFor,
  PRIORITY_LEVELS,
  ResultSink,
  sleep,
  startWith,
} from './conformance-kit.ts';

let modelCounter = 0;

export function assertTransportConformance(makeHarness: () => Promise<ConformanceHarness>): void {
  let h: ConformanceHarness;
  const transports: Transport[] = [];
  const producers: Producer[] = [];

  const transport = (): Transport => {
    const t = h.createTransport();
    transports.push(t);
    return t;
  };
  const producer = (): Producer => {
    const p = h.createProducer();
    producers.push(p);
    return p;
  };
  const newModel = (): string => `conf${process.pid}x${Date.now().toString(36)}x${++modelCounter}`;
  const ids = (ds: readonly Delivery[]): string[] => ds.map(idOf).sort();
  const T = (): number => h.redeliveryTimeoutMs;
  /** A fresh consumer of `model` gets nothing: what was acked before a crash is not redelivered. */
  const expectNoRedelivery = async (model: string): Promise<void> => {
    const again = transport();
    const inbox = new Inbox();
    await startWith(again, model, inbox);
    expect(await inbox.quietFor(Math.min(T(), 8_000))).toEqual([]);
  };

  beforeAll(async () => {
    h = await makeHarness();
  });
  afterEach(async () => {
    await Promise.allSettled(transports.splice(0).map((t) => t.close()));
    await Promise.allSettled(producers.splice(0).map((p) => p.close()));
  });
  afterAll(async () => {
    await h?.cleanup();
  });

  describe('delivery and replies', () => {
    it('delivers every request with its model and priority, and publishes each result to the default reply topic', async () => {
      const model = newModel();
      const p = producer();
      const sink = new ResultSink();
      const sub = await p.subscribeReplies(`${model}.replies`, sink.onResult, { fromBeginning: true });
      const requests = Array.from({ length: 12 }, (_, i) => makeRequest(model, `r${i}`, i % PRIORITY_LEVELS));
      await p.publish(requests);

      const t = transport();
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      const got = await inbox.waitFor(12, 30_000);
      for (const d of got) {
        const req = decodeBody(d);
        expect(d.model).toBe(model);
        expect(d.priority).toBe(req.priority);
        expect(d.redelivered).toBe(false);
      }
      expect(ids(got)).toEqual(requests.map((r) => r.id).sort());

      await t.settle(got.map(outcomeFor));
      const results = await sink.waitFor(12, 30_000);
      expect(results.map((r) => r.id).sort()).toEqual(requests.map((r) => r.id).sort());
      const r0 = results.find((r) => r.id === 'r0');
      expect(r0?.status).toBe('ok');
      expect(r0?.meta).toEqual({ n: 'r0' });
      expect(Array.from(new Float32Array(new Uint8Array(r0?.outputs?.[0]?.data ?? []).slice().buffer))).toEqual([0, 1.5, -2]);
      await sub.close();
    });

    it('request() awaits the reply on the producer inbox, and times out with TIMEOUT when nobody answers', async () => {
      const model = newModel();
      const p = producer();
      const t = transport();
      await t.start({
        subscriptions: [{ model, priorityLevels: PRIORITY_LEVELS }],
        onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)),
      });
      const result = await p.request(makeRequest(model, 'rr1', 1, { replyTo: 'ignored-by-request' }), { timeoutMs: 30_000 });
      expect(result.id).toBe('rr1');
      expect(result.status).toBe('ok');

      const silent = newModel();
      const err = await p.request(makeRequest(silent, 'rr2', 0), { timeoutMs: 300 }).catch((e: unknown) => e);
      expect(FleetError.is(err, 'TIMEOUT')).toBe(true);
    });
  });

  describe('priority', () => {
    it('a later priority-0 request overtakes a deep lowest-priority backlog', async () => {
      const model = newModel();
      const p = producer();
      const low = PRIORITY_LEVELS - 1;
      const backlog = 300;
      await p.publish(Array.from({ length: backlog }, (_, i) => makeRequest(model, `low${i}`, low)));

      // Stand-in runtime: a local queue ordered by priority, one item at a time.
      const t = transport();
      const local: Delivery[] = [];
      await t.start({ subscriptions: [{ model, priorityLevels: PRIORITY_LEVELS }], onDeliveries: (ds) => local.push(...ds) });
      let settledLow = 0;
      let urgentDone = 0;
      let lowLeftWhenUrgentDone = -1;
      let published = false;
      const deadline = Date.now() + 60_000;
      while (settledLow + urgentDone < backlog + 5 && Date.now() < deadline) {
        if (!published && settledLow >= 20) {
          published = true;
          await p.publish(Array.from({ length: 5 }, (_, i) => makeRequest(model, `urgent${i}`, 0)));
        }
        local.sort((a, b) => (a.priority ?? 0) - (b.priority ?? 0));
        const next = local.shift();
        if (next === undefined) {
          await sleep(5);
          continue;
        }
        await t.settle([outcomeFor(next)]);
        if (next.priority === 0) {
          urgentDone++;
          if (urgentDone === 5) lowLeftWhenUrgentDone = backlog - settledLow;
        } else settledLow++;
        await sleep(2);
      }
      expect(urgentDone).toBe(5);
      // The urgent ones were served while most of the backlog was still waiting.
      expect(lowLeftWhenUrgentDone).toBeGreaterThan(backlog / 2);
    });
  });

  describe('acknowledgement', () => {
    it('acks only after the result is published: a failed publish leaves the request unacked for redelivery', async () => {
      const model = newModel();
      const p = producer();
      await p.publish([makeRequest(model, 'a1', 0, { replyTo: h.unpublishableReplyTo })]);

      const a = transport();
      const inboxA = new Inbox();
      await startWith(a, model, inboxA);
      const [d] = await inboxA.waitFor(1, 30_000);
      const err = await a.settle([outcomeFor(d as Delivery)]).catch((e: unknown) => e);
      expect(FleetError.is(err, 'TRANSPORT_ERROR')).toBe(true);
      await h.crash(a);

      // Redelivered; this time the result goes to the default reply topic.
      const b = transport();
      const inboxB = new Inbox();
      await startWith(b, model, inboxB);
      const [again] = await inboxB.waitFor(1, T());
      expect(idOf(again as Delivery)).toBe('a1');
      if (h.redeliveredFlag) expect(again?.redelivered).toBe(true);
      const sink = new ResultSink();
      const sub = await p.subscribeReplies(`${model}.replies`, sink.onResult, { fromBeginning: true });
      await b.settle([{ ...outcomeFor(again as Delivery), replyTo: undefined }]);
      // settle resolved: the result is there and the request is acked, so a crash now loses nothing
      // and redelivers nothing.
      await h.crash(b);
      expect((await sink.waitFor(1, 30_000)).map((r) => r.id)).toEqual(['a1']);

      await expectNoRedelivery(model);
      await sub.close();
    });

    it('settling a delivery twice is refused', async () => {
      const model = newModel();
      const p = producer();
      await p.publish([makeRequest(model, 'twice', 1)]);
      const t = transport();
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      const [d] = await inbox.waitFor(1, 30_000);
      await t.settle([outcomeFor(d as Delivery)]);
      const err = await t.settle([outcomeFor(d as Delivery)]).catch((e: unknown) => e);
      expect(FleetError.is(err, 'INVALID_ARGUMENT')).toBe(true);
    });
  });

  describe('redelivery after a crash', () => {
    it('another consumer gets every unacked request of a crashed one', async () => {
      const model = newModel();
      const p = producer();
      const requests = Array.from({ length: 10 }, (_, i) => makeRequest(model, `c${i}`, 1));
      await p.publish(requests);

      const a = transport();
      const inboxA = new Inbox();
      await startWith(a, model, inboxA);
      const got = await inboxA.waitFor(10, 30_000);
      // Settle in delivery order, so on Kafka the settled ones form the committed prefix.
      const settled = got.slice(0, 4);
      await a.settle(settled.map(outcomeFor));
      await h.crash(a);
      const unsettled = ids(got.slice(4));

      const b = transport();
      const inboxB = new Inbox();
      await startWith(b, model, inboxB);
      const again = await inboxB.waitFor(6, T());
      await inboxB.quietFor(500);
      const againIds = ids(inboxB.all);
      if (h.exactRedelivery) expect(againIds).toEqual(unsettled);
      else {
        for (const id of unsettled) expect(againIds).toContain(id);
        for (const id of againIds) expect(requests.map((r) => r.id)).toContain(id);
      }
      if (h.redeliveredFlag) for (const d of again) expect(d.redelivered).toBe(true);
      await b.settle(inboxB.all.map(outcomeFor));
    });
  });

  describe('device-hang suspects', () => {
    it('markSuspect counts travel with the broker: the next consumers see them, one higher per mark; others see none', async () => {
      const model = newModel();
      const p = producer();
      await p.publish(Array.from({ length: 6 }, (_, i) => makeRequest(model, `s${i}`, 1)));
      const countsOf = (ds: readonly Delivery[]): Record<string, number> => Object.fromEntries(ds.map((d) => [idOf(d), d.suspectCount ?? 0]));

      const a = transport();
      const inboxA = new Inbox();
      await startWith(a, model, inboxA);
      const got = await inboxA.waitFor(6, 30_000);
      expect(Object.values(countsOf(got))).toEqual([0, 0, 0, 0, 0, 0]);
      const hung = got.filter((d) => ['s1', 's4'].includes(idOf(d)));
      expect(await a.markSuspect(hung)).toBe(true);
      await h.crash(a);

      const b = transport();
      const inboxB = new Inbox();
      await startWith(b, model, inboxB);
      await inboxB.waitFor(6, T());
      expect(countsOf(inboxB.all)).toEqual({ s0: 0, s1: 1, s2: 0, s3: 0, s4: 1, s5: 0 });
      // s4 hangs a device again; the others are answered.
      await b.settle(inboxB.all.filter((d) => idOf(d) !== 's4').map(outcomeFor));
      expect(await b.markSuspect(inboxB.all.filter((d) => idOf(d) === 's4'))).toBe(true);
      await h.crash(b);

      const c = transport();
      const inboxC = new Inbox();
      await startWith(c, model, inboxC);
      const last = await inboxC.waitFor(1, T());
      await inboxC.quietFor(500);
      const s4 = inboxC.all.find((d) => idOf(d) === 's4');
      expect(s4?.suspectCount).toBe(2);
      for (const d of inboxC.all) if (idOf(d) !== 's4') expect(d.suspectCount ?? 0).toBe(0);
      await c.settle(inboxC.all.map(outcomeFor));
      expect(last.length).toBeGreaterThan(0);
    });
  });

  describe('dead letters', () => {
    it('undecodable input gets an invalid result and a DLQ record with the reason and the original body', async () => {
      const model = newModel();
      const p = producer();
      const sink = new ResultSink();
      const sub = await p.subscribeReplies(`${model}.replies`, sink.onResult, { fromBeginning: true });
      await p.publishRaw([{ model, body: h.garbage, priority: 0, key: 'garbage-1' }]);
      await p.publish([makeRequest(model, 'good', 0)]);

      const t = transport();
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      const got = await inbox.waitFor(2, 30_000);
      const outcomes = got.map(outcomeFor);
      expect(outcomes.filter((o) => o.dlq !== undefined)).toHaveLength(1);
      await t.settle(outcomes);

      const dlq = await h.readDlq(model, 1, 30_000);
      expect(dlq).toHaveLength(1);
      expect(dlq[0]?.reason).toBe('INVALID_MESSAGE');
      expect(dlq[0]?.body).toEqual(h.garbage);
      const results = await sink.waitFor(2, 30_000);
      expect(results.map((r) => r.status).sort()).toEqual(['invalid', 'ok']);
      await sub.close();

      // Dead-lettered input is acked: not redelivered after a crash.
      await h.crash(t);
      await expectNoRedelivery(model);
    });

    it('dead letters are listed by reason and replayed to their source at their priority; the replayed request is answered again', async () => {
      const model = newModel();
      const p = producer();
      const sink = new ResultSink();
      const sub = await p.subscribeReplies(`${model}.replies`, sink.onResult, { fromBeginning: true });
      const t = transport();
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      await p.publish([makeRequest(model, 'poison', 2), makeRequest(model, 'fine', 1)]);
      await p.publishRaw([{ model, body: h.garbage, priority: 0, key: 'garbage-2' }]);
      const first = await inbox.waitFor(3, 30_000);
      // 'poison' is quarantined the way the runtime does it after hangs: a failed result and a DLQ
      // record. The garbage is dead-lettered a moment later, so a time window can tell them apart.
      const outcomes = first.map((d) => {
        const o = outcomeFor(d);
        if (o.dlq !== undefined || idOf(d) !== 'poison') return o;
        const error = new FleetError('DEVICE_HANG', 'on a device during 2 hangs; quarantined').toResultError();
        return { ...o, result: { ...o.result, status: 'failed' as const, outputs: undefined, error }, dlq: { reason: 'DEVICE_HANG', message: error.message } };
      });
      await t.settle(outcomes.filter((o) => o.result.status !== 'invalid'));
      await h.readDlq(model, 1, 30_000);
      await sleep(100);
      const betweenAt = Date.now();
      await sleep(100);
      await t.settle(outcomes.filter((o) => o.result.status === 'invalid'));
      await h.readDlq(model, 2, 30_000);
      // poison failed, fine ok, the garbage invalid (id '').
      const firstResults = await sink.waitFor(3, 30_000);
      expect(firstResults.find((r) => r.id === 'poison')?.status).toBe('failed');

      const dl = h.createDeadLetters();
      try {
        const listing = await dl.list({ model });
        expect(listing.byReason).toEqual({ DEVICE_HANG: 1, INVALID_MESSAGE: 1 });
        const hangs = await dl.list({ model, reasons: ['DEVICE_HANG'] });
        expect(hangs.matched).toBe(1);
        expect(hangs.letters[0]).toMatchObject({ reason: 'DEVICE_HANG', requestId: 'poison', priority: 2 });
        expect(hangs.letters[0]?.source).toBeTruthy();
        expect((await dl.list({ model, sinceAt: Date.now() + 60_000 })).scanned).toBe(0);
        expect((await dl.list({ model, sinceAt: betweenAt })).byReason).toEqual({ INVALID_MESSAGE: 1 });

        // A dry run counts and changes nothing.
        expect(await dl.replay({ model, reasons: ['DEVICE_HANG'], dryRun: true })).toMatchObject({ matched: 1, replayed: 1, skipped: [] });
        expect(await inbox.quietFor(1_500)).toEqual([]);
        expect((await dl.list({ model })).byReason).toEqual({ DEVICE_HANG: 1, INVALID_MESSAGE: 1 });

        expect(await dl.replay({ model, reasons: ['DEVICE_HANG'] })).toMatchObject({ matched: 1, replayed: 1, skipped: [] });
        const [again] = (await inbox.waitFor(4, 30_000)).slice(3);
        expect(idOf(again!)).toBe('poison');
        expect(again!.priority).toBe(2);
        expect(decodeBody(again!)).toEqual(decodeBody(first.find((d) => outcomeFor(d).result.id === 'poison')!));
        // The worker answers it like any request: a second result for the same id reaches the reply topic.
        await t.settle([outcomeFor(again!)]);
        const results = await sink.waitFor(4, 30_000);
        expect(results.filter((r) => r.id === 'poison').map((r) => r.status)).toEqual(['failed', 'ok']);

        const after = await dl.list({ model });
        expect(after.byReason).toEqual(h.deadLettersStay ? { DEVICE_HANG: 1, INVALID_MESSAGE: 1 } : { INVALID_MESSAGE: 1 });
        // Kafka keeps the record but marks it replayed: on every transport a second replay re-sends nothing.
        expect((await dl.replay({ model, reasons: ['DEVICE_HANG'] })).replayed).toBe(0);
        expect(await inbox.quietFor(1_000)).toEqual([]);
      } finally {
        await dl.close();
        await sub.close();
      }
    });

    it('a replay reads the DLQ as it was when it began: what it dead-letters again waits for the next run', async () => {
      const model = newModel();
      const p = producer();
      const t = transport();
      // A worker for a model that is still not deployed: everything it gets is dead-lettered again at once.
      const unknown = (d: Delivery): ReturnType<typeof outcomeFor> => {
        const o = outcomeFor(d);
        const error = new FleetError('UNKNOWN_MODEL', `model ${model} is not served here`).toResultError();
        return { ...o, result: { ...o.result, status: 'rejected' as const, outputs: undefined, error }, dlq: { reason: 'UNKNOWN_MODEL', message: error.message } };
      };
      let settled = 0;
      await t.start({
        subscriptions: [{ model, priorityLevels: PRIORITY_LEVELS }],
        onDeliveries: (ds) => void t.settle(ds.map(unknown)).then(() => (settled += ds.length)),
      });
      const n = 120;
      await p.publish(Array.from({ length: n }, (_, i) => makeRequest(model, `u${i}`, i % PRIORITY_LEVELS)));
      const deadline = Date.now() + 60_000;
      while (settled < n && Date.now() < deadline) await sleep(50);
      await h.readDlq(model, n, 30_000);
      const dl = h.createDeadLetters();
      try {
        const report = await dl.replay({ model });
        expect(report).toMatchObject({ scanned: n, matched: n, replayed: n, skipped: [] });
        while (settled < 2 * n && Date.now() < deadline) await sleep(50);
        expect(settled).toBe(2 * n);
        const after = await dl.list({ model });
        expect(after.byReason).toEqual({ UNKNOWN_MODEL: h.deadLettersStay ? 2 * n : n });
      } finally {
        await dl.close();
      }
    });

    it('a replyTo no topic or queue can have sends the request to the DLQ; the results settled with it are published', async () => {
      const model = newModel();
      const p = producer();
      const sink = new ResultSink();
      const sub = await p.subscribeReplies(`${model}.replies`, sink.onResult, { fromBeginning: true });
      await p.publish([makeRequest(model, 'unreachable', 0), makeRequest(model, 'reachable', 0)]);

      const t = transport();
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      const got = await inbox.waitFor(2, 30_000);
      // ':' is illegal in Kafka topics, BullMQ queues and memory queues alike.
      const outcomes = got.map((d) => {
        const o = outcomeFor(d);
        return o.result.id === 'unreachable' ? { ...o, replyTo: 'no:such' } : o;
      });
      await t.settle(outcomes);

      const dlq = await h.readDlq(model, 1, 30_000);
      expect(dlq).toHaveLength(1);
      expect(dlq[0]?.reason).toBe('INVALID_ARGUMENT');
      expect(dlq[0]?.message).toMatch(/replyTo "no:such" is not a legal/);
      const results = await sink.waitFor(1, 30_000);
      expect(results.map((r) => r.id)).toEqual(['reachable']);
      await sub.close();

      await h.crash(t);
      await expectNoRedelivery(model);
    });
  });

  describe('backpressure', () => {
    it('pause stops the paused priorities only; resume brings them back', async () => {
      const model = newModel();
      const p = producer();
      const t = transport();
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      t.pause(model, [1, 2]);
      await sleep(1_000); // let a fetch already in flight come back
      await p.publish([
        ...Array.from({ length: 5 }, (_, i) => makeRequest(model, `lo${i}`, 2)),
        ...Array.from({ length: 5 }, (_, i) => makeRequest(model, `mid${i}`, 1)),
        ...Array.from({ length: 3 }, (_, i) => makeRequest(model, `hi${i}`, 0)),
      ]);
      await inbox.waitFor(3, 30_000);
      await inbox.quietFor(1_500);
      // All of it, not the first three: a broker that hands out priority 0 first would pass a
      // check of the first three while ignoring the pause of 1 and 2 in the same delivery.
      expect(inbox.all.map((d) => d.priority)).toEqual([0, 0, 0]);

      t.pause(model, [0]);
      await sleep(1_000);
      await p.publish([makeRequest(model, 'hi-late', 0)]);
      await inbox.quietFor(1_500);
      expect(inbox.all.map(idOf).sort()).toEqual(['hi0', 'hi1', 'hi2']);

      t.resume(model, [0, 1, 2]);
      const all = await inbox.waitFor(14, 30_000);
      expect(ids(all)).toEqual(
        ['hi-late', ...['0', '1', '2'].map((i) => `hi${i}`), ...[0, 1, 2, 3, 4].flatMap((i) => [`lo${i}`, `mid${i}`])].sort(),
      );
      await t.settle(all.map(outcomeFor));
    });

    it('sourceLag reports the work waiting at the source', async () => {
      const model = newModel();
      const p = producer();
      const t = transport();
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      t.pause(model, [0, 1, 2]);
      await sleep(1_000);
      await p.publish(Array.from({ length: 7 }, (_, i) => makeRequest(model, `lag${i}`, i % PRIORITY_LEVELS)));
      const deadline = Date.now() + 15_000;
      let lag = 0;
      while (Date.now() < deadline) {
        lag = (await t.sourceLag())[model] ?? 0;
        if (lag === 7) break;
        await sleep(200);
      }
      expect(lag).toBe(7);
      t.resume(model, [0, 1, 2]);
      const all = await inbox.waitFor(7, 30_000);
      await t.settle(all.map(outcomeFor));
      const after = Date.now() + 15_000;
      while (Date.now() < after && ((await t.sourceLag())[model] ?? 0) > 0) await sleep(200);
      expect((await t.sourceLag())[model] ?? 0).toBe(0);
    });
  });

  describe('shutdown', () => {
    it('connected() is false before start, true once started (and still true a few heartbeats later), false after close', async () => {
      const model = newModel();
      const t = transport();
      expect(t.connected()).toBe(false);
      await startWith(t, model, new Inbox());
      expect(t.connected()).toBe(true);
      // Idle with nothing to fetch: the client still hears from the broker (Kafka: heartbeats).
      await new Promise((r) => setTimeout(r, 6_000));
      expect(t.connected()).toBe(true);
      await t.close();
      expect(t.connected()).toBe(false);
    });

    it('stopIntake stops deliveries but settle still works; close gives back what was released or left unsettled', async () => {
      const model = newModel();
      const p = producer();
      await p.publish(Array.from({ length: 6 }, (_, i) => makeRequest(model, `s${i}`, 1)));
      const t = transport();
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      const got = await inbox.waitFor(6, 30_000);
      await t.stopIntake();
      await p.publish([makeRequest(model, 'after-stop', 1)]);
      expect(await inbox.quietFor(1_500)).toEqual([]);

      const sink = new ResultSink();
      const sub = await p.subscribeReplies(`${model}.replies`, sink.onResult, { fromBeginning: true });
      await t.settle(got.slice(0, 2).map(outcomeFor));
      // Settled after intake stopped: published, not only acked (the drain path publishes this way).
      expect((await sink.waitFor(2, 30_000)).map((r) => r.id).sort()).toEqual(ids(got.slice(0, 2)));
      await sub.close();
      await t.release(got.slice(2, 4));
      // got[4], got[5] stay unsettled: close must give them back too, and not hang.
      await t.close();
      const err = await t.settle([outcomeFor(got[4] as Delivery)]).catch((e: unknown) => e);
      expect(FleetError.is(err)).toBe(true);

      const b = transport();
      const inboxB = new Inbox();
      await startWith(b, model, inboxB);
      await inboxB.waitFor(5, T());
      await inboxB.quietFor(500);
      const expected = [...ids(got.slice(2)), 'after-stop'].sort();
      if (h.exactRedelivery) expect(ids(inboxB.all)).toEqual(expected);
      else for (const id of expected) expect(ids(inboxB.all)).toContain(id);
      expect(ids(inboxB.all)).not.toContain(idOf(got[0] as Delivery));
      await b.settle(inboxB.all.map(outcomeFor));
      await b.close();
    });
  });
}
