// A publish that returned ok must have written each request once. The answer to a produce request
// can be lost after the broker wrote it (a broker restart, a connection reset); kafkajs then sends
// the request again, and a producer that is not idempotent writes the batch a second time: every
// copy is answered by the workers, so the caller sees its request answered twice.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { startLocalKafka } from '../../helpers/local-kafka-service.ts';
import { mlpRequest } from '../../helpers/mlp-request.ts';
import { orderedCleanups } from '../../helpers/ordered-cleanups.ts';
import { uniqueName } from '../../helpers/services.ts';
import { kafkaSettings } from '../transport/kafka-harness.ts';
import { readCommitted } from '../transport/kafka-topic-reader.ts';
import { produceSniffingFactory } from '../transport/produce-sniffer.ts';

const cleanups = orderedCleanups();

/**
 * Real TCP connections to the real broker. Once armed, the next Produce request goes to the
 * broker, which writes it, but its answer is never read: the connection is closed `lostAfterMs`
 * later, as when a broker dies right after appending.
 */
function answerLosingFactory(lostAfterMs: number): { factory: ReturnType<typeof produceSniffingFactory>; arm(): void; lost(): number } {
  let armed = false;
  let lost = 0;
  const factory = produceSniffingFactory('answerLosing', (socket, produce, forward) => {
    if (!produce || !armed) return forward();
    armed = false;
    lost++;
    const written = forward();
    socket.pause();
    setTimeout(() => socket.destroy(new Error('test: the answer to a produce request was lost')), lostAfterMs);
    return written;
  });
  return { factory, arm: () => void (armed = true), lost: () => lost };
}

/** How many times each key is on `topic`. */
async function copiesPerKey(topic: string): Promise<Map<string, number>> {
  const copies = new Map<string, number>();
  for (const m of await readCommitted(topic)) {
    const key = m.key?.toString() ?? '';
    copies.set(key, (copies.get(key) ?? 0) + 1);
  }
  return copies;
}

describe('kafka producer: a produce request whose answer is lost', () => {
  it('writes each request of a publish that returned ok once', async () => {
    const model = uniqueName('dupmodel');
    const lossy = answerLosingFactory(300);
    // One partition: the two publishes below are batches of the same size on it.
    const warnings: string[] = [];
    const logger = { error: () => undefined, warn: (_: object, msg: string) => void warnings.push(msg), info: () => undefined, debug: () => undefined };
    const producer = new KafkaProducer(kafkaSettings(), { partitions: 1, socketFactory: lossy.factory, logger });
    cleanups.push(() => producer.close());
    const ids = (prefix: string): string[] => Array.from({ length: 50 }, (_, i) => `${prefix}${i}`);
    const publish = (list: readonly string[]): Promise<void> => producer.publish(list.map((id) => ({ ...mlpRequest(id, 'dup-replies'), model })));
    await publish(ids('a'));
    lossy.arm();
    // Two publishes at once (a service's concurrent callers, requestMany under load): one loses
    // its answer; the other must neither take its sequence numbers (kafkajs rolls them back while
    // it waits to retry, and the broker would drop the other as its duplicate) nor be lost.
    await Promise.all([publish(ids('b')), publish(ids('d'))]);
    expect(lossy.lost()).toBe(1);
    // A later publish on the same producer still goes out, once.
    await publish(ids('c'));

    const copies = await copiesPerKey(`${model}.requests.p0`);
    const twice = [...copies].filter(([, n]) => n !== 1);
    const missing = [...ids('a'), ...ids('b'), ...ids('c'), ...ids('d')].filter((id) => !copies.has(id));
    console.log(
      `[producer duplicates] ${copies.size} ids on the topic, ${missing.length} missing (${missing.slice(0, 3).join(' ')}), ` +
        `${twice.length} not written once (${twice.slice(0, 3).map(([k, n]) => `${k}x${n}`).join(' ')})`,
    );
    expect([...copies.keys()].sort()).toEqual([...ids('a'), ...ids('b'), ...ids('c'), ...ids('d')].sort());
    expect(twice).toEqual([]);
    // Its retries are bounded on purpose (a failed producer is replaced): kafkajs's warning about
    // that would read as a fault on every producer it makes.
    expect(warnings.filter((m) => m.includes('Limiting retries'))).toEqual([]);
  }, 60_000);
});

describe('kafka producer: publishes that went out together in one send', () => {
  it('a publish whose messages all went out is done though a later chunk of the same send failed', async () => {
    const model = uniqueName('chunkmodel');
    // Once armed, the next two produce requests go through and every later one is reset.
    let passes: number | undefined;
    let reset = 0;
    const factory = produceSniffingFactory('failLaterChunks', (socket, produce, forward) => {
      if (!produce || passes === undefined) return forward();
      if (passes > 0) {
        passes--;
        return forward();
      }
      reset++;
      socket.destroy(Object.assign(new Error('read ECONNRESET (test)'), { code: 'ECONNRESET' }));
      return true;
    });
    const producer = new KafkaProducer(kafkaSettings(), { partitions: 1, socketFactory: factory });
    cleanups.push(() => producer.close());
    const publish = (prefix: string, n: number): Promise<void> =>
      producer.publish(Array.from({ length: n }, (_, i) => ({ ...mlpRequest(`${prefix}${i}`, 'chunk-replies'), model })));
    await publish('warm', 1);
    passes = 2;
    // x goes out alone; a (small) and b (~2 MB, several produce requests) wait for it and go
    // together: a and b's start in the first request, which passes; b's rest fails.
    const settled = await Promise.allSettled([publish('x', 1), publish('a', 10), publish('b', 6_000)]);
    console.log(`[producer chunks] ${settled.map((r) => r.status).join(' ')}; ${reset} produce requests reset`);
    expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
    expect((settled[2] as PromiseRejectedResult).reason).toBeInstanceOf(FleetError);
    expect(((settled[2] as PromiseRejectedResult).reason as FleetError).retriable).toBe(true);
    const copies = await copiesPerKey(`${model}.requests.p0`);
    for (const id of ['x0', ...Array.from({ length: 10 }, (_, i) => `a${i}`)]) expect(copies.get(id)).toBe(1);
  }, 90_000);
});

describe('kafka producer: a broker that stays away', () => {
  it('fails a publish with a retriable FleetError within a bound instead of retrying for ever', async () => {
    const kafka = await startLocalKafka(mkdtempSync(join(tmpdir(), 'npu-fleet-producer-away-kafka-')));
    cleanups.push(() => kafka.stop());
    const model = uniqueName('awaymodel');
    const producer = new KafkaProducer(kafkaSettings({ brokers: kafka.brokers }), { partitions: 1 });
    cleanups.push(() => producer.close());
    await producer.publish([{ ...mlpRequest('before', 'away-replies'), model }]);

    await kafka.stop();
    const startedAt = Date.now();
    // Two at once: the second waits for the first, then tries on a fresh kafkajs producer.
    const failures = await Promise.all(
      ['away1', 'away2'].map((id) =>
        producer.publish([{ ...mlpRequest(id, 'away-replies'), model }]).then(
          () => ({ error: undefined as unknown, tookMs: Date.now() - startedAt }),
          (e: unknown) => ({ error: e, tookMs: Date.now() - startedAt }),
        ),
      ),
    );
    for (const { error, tookMs } of failures) {
      console.log(`[producer away] publish failed after ${tookMs} ms: ${(error as Error | undefined)?.message.slice(0, 160)}`);
      expect(error).toBeInstanceOf(FleetError);
      expect((error as FleetError).retriable).toBe(true);
      expect(tookMs).toBeLessThan(60_000);
    }

    // Back again, the same producer publishes once more (a fresh kafkajs producer after the failure).
    await kafka.restart({});
    const backAt = Date.now();
    for (;;) {
      try {
        await producer.publish([{ ...mlpRequest('after', 'away-replies'), model }]);
        break;
      } catch (err) {
        if (Date.now() - backAt > 60_000) throw err;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    const admin = new Kafka({ brokers: kafka.brokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      const offsets = await admin.fetchTopicOffsets(`${model}.requests.p0`);
      const written = offsets.reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
      console.log(`[producer away] ${written} messages on the topic after the broker came back (${Date.now() - backAt} ms to publish again)`);
      expect(written).toBeGreaterThanOrEqual(2);
    } finally {
      await admin.disconnect();
    }
  }, 180_000);
});
