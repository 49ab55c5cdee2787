// Exactly-once: a worker SIGKILLed mid-transaction leaves that transaction open, and read_committed
// readers of every partition it wrote (client inboxes and {model}.replies, with the other workers'
// results there) stop at its first record until the coordinator aborts it after
// transactionTimeoutMs (60 s: `npu-fleet start` with a worker SIGKILLed under load answered
// nothing, from any worker, for a minute). The next worker of the device, given the dead one's
// note, fences its transactional id as it starts: the broker aborts the transaction at once.
import { describe, expect, it } from 'vitest';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { predecessorTransactionalId } from '../../../src/transport/kafka/predecessor-members.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';
import { uniqueName } from '../../helpers/services.ts';
import { Inbox } from './conformance-kit.ts';
import { adminKafka, kafkaSettings, readTopic } from './kafka-harness.ts';

const track = closeAfterEach();

describe('kafka transport, exactly-once: the next worker of a device after a SIGKILL', () => {
  it("fences the dead worker's open transaction (from its note) at start, so read_committed readers go on at once", async () => {
    const settings = kafkaSettings({ exactlyOnce: true, transactionTimeoutMs: 60_000 });
    const model = uniqueName('eosheir').replace(/-/g, '');
    const topic = uniqueName('eos-heir-replies');
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await createTopicsSettled(admin, [{ topic, numPartitions: 1 }]);
    } finally {
      await admin.disconnect();
    }

    // The worker that dies: its note names its transactional id.
    const notes: string[] = [];
    const dead = new KafkaTransport(settings, { partitions: 1 });
    await dead.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: () => undefined, predecessor: { previous: undefined, save: (n) => notes.push(n) } });
    await dead.close();
    const note = notes.at(-1);
    const transactionalId = predecessorTransactionalId(note);
    expect(transactionalId).toMatch(new RegExp(`^${settings.clientId}\\.${settings.groupId}\\.`));

    // ... killed mid-transaction: a result written in its transaction, never committed nor aborted.
    const zombie = adminKafka().producer({ transactionalId, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 60_000 });
    track({ close: () => zombie.disconnect() });
    await zombie.connect();
    const tx = await zombie.transaction();
    await tx.send({ topic, messages: [{ value: 'uncommitted' }] });
    // Another worker's result behind it on the same partition.
    const other = adminKafka().producer();
    track({ close: () => other.disconnect() });
    await other.connect();
    await other.send({ topic, messages: [{ value: 'after' }] });

    const next = track(new KafkaTransport(settings, { partitions: 1 }));
    await next.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: new Inbox().onDeliveries, predecessor: { previous: note, save: () => undefined } });
    // Without the fence nothing is readable until the 60 s transaction timeout.
    const read = await readTopic(topic, 1, 4_000);
    expect(read.map((r) => r.value.toString())).toEqual(['after']);
  });
});
