// SIGKILL a Kafka worker process (no LeaveGroup: its member stays in the group until its session
// times out) and start the next worker of its device: with the note the dead one left, the next
// removes the dead member at once and gets its partitions within seconds, not sessionTimeoutMs.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { KafkaSettings } from '../../../src/contracts/fleet-config.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { openPredecessorNote } from '../../../src/runtime/predecessor-note.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { predecessorMembers, removePredecessorMembers } from '../../../src/transport/kafka/predecessor-members.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { fixtureProcesses } from '../../helpers/spawn-fixture.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { idOf, Inbox, makeRequest, outcomeFor } from './conformance-kit.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';

const here = dirname(fileURLToPath(import.meta.url));
const track = closeAfterEach();
const spawnFixture = fixtureProcesses();

const SESSION_TIMEOUT_MS = 30_000;
/** Well under the session timeout: a takeover this fast did not wait for the dead member's session. */
const TAKEOVER_MS = 10_000;
const REQUESTS = 6;
const log = createLogger({ level: 'silent' });

interface Dead {
  readonly settings: KafkaSettings;
  readonly model: string;
  readonly notePath: string;
  readonly held: readonly string[];
  readonly killedAt: number;
}

/** A worker process that read every request (both partitions), then was SIGKILLed holding them. */
async function deadWorker(): Promise<Dead> {
  const settings = kafkaSettings({ sessionTimeoutMs: SESSION_TIMEOUT_MS });
  const model = uniqueName('heir').replace(/-/g, '');
  const producer = track(new KafkaProducer(settings, { partitions: 2 }));
  await producer.publish(Array.from({ length: REQUESTS }, (_, i) => makeRequest(model, `h${i}`, 0, { streamKey: `s${i}` })));
  const notePath = join(tempDir('npu-fleet-kafka-note-'), 'npu-fleet-x-device-0.owner.json');
  const worker = spawnFixture(join(here, 'fixtures/kafka-predecessor-worker.ts'), [JSON.stringify(settings), model, notePath]);
  await worker.untilCount(/^held /, REQUESTS, 60_000);
  worker.child.kill('SIGKILL');
  await worker.exited;
  const held = worker.lines.filter((l) => l.startsWith('held ')).map((l) => l.slice(5));
  return { settings, model, notePath, held, killedAt: Date.now() };
}

describe('kafka transport: the next worker of a device after a SIGKILL', () => {
  it("removes the dead worker's group member (from its note) and gets its partitions within seconds, not after the session timeout", async () => {
    const dead = await deadWorker();
    // As worker-process.ts opens it: handed over because its writer is dead.
    const note = openPredecessorNote(dead.notePath, log);
    expect(predecessorMembers(note.previous)).toEqual([{ groupId: dead.settings.groupId, memberId: expect.any(String) }]);

    const next = track(new KafkaTransport(dead.settings, { partitions: 2 }));
    const inbox = new Inbox();
    await next.start({ subscriptions: [{ model: dead.model, priorityLevels: 1 }], onDeliveries: inbox.onDeliveries, predecessor: note });
    const got = await inbox.waitFor(REQUESTS, TAKEOVER_MS);
    expect(Date.now() - dead.killedAt).toBeLessThan(TAKEOVER_MS);
    expect(got.map(idOf).sort()).toEqual([...dead.held].sort());
    // The next worker left its own member for its successor.
    const [mine] = predecessorMembers((JSON.parse(readFileSync(dead.notePath, 'utf8')) as { note: string }).note);
    expect(mine?.groupId).toBe(dead.settings.groupId);
    expect(mine?.memberId).not.toBe(predecessorMembers(note.previous)[0]?.memberId);
    await next.settle(got.map(outcomeFor));
  });

  it('without the note, the dead member holds its partitions (nothing comes within the same time) until it is removed, also while the next one waits to join', async () => {
    const dead = await deadWorker();
    const blind = track(new KafkaTransport(dead.settings, { partitions: 2 }));
    const inbox = new Inbox();
    // Its join waits for the dead member's session (start() returns only once it is in the group).
    const started = blind.start({ subscriptions: [{ model: dead.model, priorityLevels: 1 }], onDeliveries: inbox.onDeliveries });
    await inbox.quietFor(TAKEOVER_MS - (Date.now() - dead.killedAt));
    expect(inbox.all).toHaveLength(0);

    const removedAt = Date.now();
    const members = predecessorMembers(openPredecessorNote(dead.notePath, log).previous);
    expect(await removePredecessorMembers(adminKafka(), members, undefined)).toBe(1);
    await started;
    const got = await inbox.waitFor(REQUESTS, 5_000);
    expect(Date.now() - removedAt).toBeLessThan(5_000);
    expect(got.map(idOf).sort()).toEqual([...dead.held].sort());
    // Gone now: a second removal finds nothing to remove and does not throw.
    expect(await removePredecessorMembers(adminKafka(), members, undefined)).toBe(0);
    await blind.settle(got.map(outcomeFor));
  });
});
