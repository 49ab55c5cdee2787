// Exactly-once through the runtime's OutcomePublisher (4 settle slots): results of later offsets of
// a partition reach the publisher before an earlier offset's (an `expired`/`invalid` answer goes
// out at once, two batches in flight, deadline order). A transaction takes a partition's
// contiguous settled prefix only, so each of those settles waits for the earlier offset.
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { OutcomePublisher } from '../../../src/runtime/outcome-publisher.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import type { Outcome } from '../../../src/transport/transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { idOf, Inbox, makeRequest, outcomeFor, sleep, startWith } from './conformance-kit.ts';
import { committed, kafkaSettings } from './kafka-harness.ts';
import { readCommitted, transactionsSettled } from './kafka-topic-reader.ts';

const track = closeAfterEach();

describe('kafka exactly-once through the runtime publisher', () => {
  it('five settles of later offsets pushed before the earlier offset do not hold every slot; all resolve, each result once', async () => {
    const settings = kafkaSettings({ exactlyOnce: true });
    const model = uniqueName('eosslots').replace(/-/g, '');
    const ids = Array.from({ length: 6 }, (_, i) => `o${i}`);
    const producer = track(new KafkaProducer(settings, { partitions: 1 }));
    await producer.publish(ids.map((id) => makeRequest(model, id, 0)));
    const t = track(new KafkaTransport(settings, { partitions: 1, instanceId: 'a' }));
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    const got = await inbox.waitFor(ids.length, 30_000);
    expect(got.map(idOf)).toEqual(ids);

    const settledAt = new Map<string, number>();
    const publisher = new OutcomePublisher(
      t,
      createLogger({ level: 'silent' }),
      1,
      500,
      (outcomes: readonly Outcome[], at: number) => {
        for (const o of outcomes) settledAt.set(o.result.id, at);
      },
      4,
    );
    const startedAt = Date.now();
    // Each its own settle: pushed past the 1 ms linger of the one before.
    for (const d of [...got.slice(1), got[0]]) {
      publisher.push(outcomeFor(d as NonNullable<typeof d>));
      await sleep(30);
    }
    const flushed = await Promise.race([publisher.flush().then(() => 'flushed' as const), sleep(10_000).then(() => 'timeout' as const)]);
    const seen = `settled after ${[...settledAt].map(([id, at]) => `${id} ${at - startedAt} ms`).join(', ')}; pending ${publisher.pending}`;
    console.log(seen);
    expect(flushed, seen).toBe('flushed');
    expect(publisher.pending).toBe(0);
    expect([...settledAt.keys()].sort()).toEqual(ids);

    // A commit returns before its markers are written (its offsets are not visible until then).
    await transactionsSettled(`${settings.clientId}.${settings.groupId}.a`);
    expect(await committed(settings.groupId, `${model}.requests.p0`)).toBe(ids.length);
    const written = (await readCommitted(`${model}.replies`)).map((m) => decodeResult(m.value ?? new Uint8Array()).id);
    expect([...written].sort()).toEqual(ids);
  }, 60_000);
});
