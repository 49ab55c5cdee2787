// Exactly-once mode and a zombie worker: a worker holding results it has not written yet is
// evicted from its group without knowing it (its session ran out while its process stalled), its
// partitions move to another worker, which answers their requests; then the zombie resumes and
// settles what it held. Its transaction must not commit: those requests would be answered twice
// (kafkajs's TxnOffsetCommit carries no member id or generation, so the broker takes its offsets,
// and its transactional id is its own, so the new owner's producer does not fence it). Before
// GroupLease: all 12 answered twice, in each of 3 runs. Once it rejoins, a partition assigned
// to it again must not keep what it held: with the lease alone, settled again after its rejoin, 4
// of the 12 were answered twice (the requests of the partition that came back to it). Two ways to
// make the zombie: its group requests swallowed on the wire (GroupFreezer, in this process), and a
// worker process of its own stopped (SIGSTOP) and continued, which settles at once when it finds it
// was stalled (before GroupLease: 12 of 12 answered twice).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { decodeResult } from '../../../src/codec/index.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { fixtureProcesses, type FixtureProcess } from '../../helpers/spawn-fixture.ts';
import { Inbox, makeRequest, outcomeFor, sleep, startWith } from './conformance-kit.ts';
import { GroupFreezer, untilEmpty } from './group-freezer.ts';
import { adminKafka, kafkaSettings, readTopic } from './kafka-harness.ts';

const track = closeAfterEach();
const spawnFixture = fixtureProcesses();
const here = dirname(fileURLToPath(import.meta.url));

/** fixtures/eos-zombie-worker.ts in a process of its own, its stdout lines collected. */
function zombieProcess(settings: object, model: string, partitions: number): FixtureProcess {
  return spawnFixture(join(here, 'fixtures/eos-zombie-worker.ts'), [JSON.stringify(settings), model, String(partitions)]);
}

/** Committed results per request id on `topic` (read_committed), read until `quietMs` pass without one. */
async function repliesPerId(topic: string, atLeast: number): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const m of await readTopic(topic, atLeast * 2, 4_000)) {
    const id = decodeResult(m.value).id;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

describe('kafka transport, exactly-once, a zombie worker', () => {
  it('a worker evicted while it held unwritten results does not answer them after its partitions moved on', async () => {
    const settings = kafkaSettings({ exactlyOnce: true, sessionTimeoutMs: 6_000 });
    const model = uniqueName('eoszombie').replace(/-/g, '');
    const ids = Array.from({ length: 12 }, (_, i) => `z${i}`);
    const producer = track(new KafkaProducer(settings, { partitions: 2 }));
    await producer.publish(ids.map((id) => makeRequest(model, id, 0)));

    const freezer = new GroupFreezer();
    const zombie = track(new KafkaTransport(settings, { partitions: 2, instanceId: 'zombie', socketFactory: freezer.socketFactory }));
    const inboxZ = new Inbox();
    await startWith(zombie, model, inboxZ);
    const held = await inboxZ.waitFor(ids.length, 30_000);

    // Its process stalls with the results in hand: the group hears nothing from it and evicts it.
    freezer.freeze();
    const frozenAt = Date.now();
    await untilEmpty(adminKafka(), settings.groupId, settings.sessionTimeoutMs + 15_000);
    const evictedMs = Date.now() - frozenAt;

    // The heir takes both partitions and answers every request.
    const heir = track(new KafkaTransport(settings, { partitions: 2, instanceId: 'heir' }));
    const inboxH = new Inbox();
    await startWith(heir, model, inboxH);
    await heir.settle((await inboxH.waitFor(ids.length, 30_000)).map(outcomeFor));

    // The zombie resumes before its consumer's next heartbeat and settles what it held.
    const settled = zombie.settle(held.map(outcomeFor)).then(
      () => 'resolved',
      (e: unknown) => `rejected: ${String(e)}`,
    );
    const early = await Promise.race([settled, sleep(5_000).then(() => 'pending')]);
    const counts = await repliesPerId(`${model}.replies`, ids.length);
    const twice = [...counts].filter(([, n]) => n > 1).length;
    console.log(`[eos zombie] evicted ${evictedMs} ms after the freeze (${freezer.swallowed} group requests swallowed); zombie settle while still frozen: ${early}; requests with more than one committed result: ${twice} of ${ids.length}`);
    expect([...counts.keys()].sort()).toEqual([...ids].sort());
    expect(twice).toBe(0);

    // Its settle fails, retriable: the runtime settles again later.
    expect(early).toMatch(/^rejected: .*no heartbeat/);

    // Thawed: it learns it was evicted and rejoins; settled again (as the runtime does), what it held
    // is done without being written (its partitions are the heir's, or back with it past the heir's
    // commits).
    freezer.thaw();
    let attempts = 0;
    for (const until = Date.now() + 90_000; ; await sleep(1_000)) {
      attempts++;
      const outcome = await zombie.settle(held.map(outcomeFor)).then(
        () => 'resolved',
        (e: unknown) => String(e),
      );
      if (outcome === 'resolved') break;
      if (Date.now() > until) throw new Error(`the zombie's settle still fails 90 s after the thaw: ${outcome}`);
    }
    const after = await repliesPerId(`${model}.replies`, ids.length);
    console.log(`[eos zombie] after the thaw: settled in ${attempts} attempt(s); requests with more than one committed result: ${[...after].filter(([, n]) => n > 1).length}`);
    expect([...after].filter(([, n]) => n > 1)).toEqual([]);
  }, 180_000);

  it('a worker process stopped (SIGSTOP) past its session while it held unwritten results does not answer them once continued (SIGCONT)', async () => {
    const settings = kafkaSettings({ exactlyOnce: true, sessionTimeoutMs: 6_000 });
    const model = uniqueName('eoszombiestop').replace(/-/g, '');
    const ids = Array.from({ length: 12 }, (_, i) => `s${i}`);
    const producer = track(new KafkaProducer(settings, { partitions: 2 }));
    await producer.publish(ids.map((id) => makeRequest(model, id, 0)));

    const zombie = zombieProcess(settings, model, 2);
    await zombie.until(new RegExp(`^held ${ids.length}$`), 60_000);
    zombie.child.kill('SIGSTOP');
    const stoppedAt = Date.now();
    await untilEmpty(adminKafka(), settings.groupId, settings.sessionTimeoutMs + 15_000);
    const evictedMs = Date.now() - stoppedAt;

    const heir = track(new KafkaTransport(settings, { partitions: 2, instanceId: 'heir' }));
    const inboxH = new Inbox();
    await startWith(heir, model, inboxH);
    await heir.settle((await inboxH.waitFor(ids.length, 30_000)).map(outcomeFor));

    // Continued: it settles what it held at once, before its consumer's next heartbeat is answered.
    zombie.child.kill('SIGCONT');
    await zombie.until(/^settle \d+ resolved$/, 90_000);
    const counts = await repliesPerId(`${model}.replies`, ids.length);
    const twice = [...counts].filter(([, n]) => n > 1).length;
    console.log(`[eos zombie, SIGSTOP] evicted ${evictedMs} ms after the stop; zombie: ${zombie.lines.filter((l) => !l.startsWith('held')).join(' | ')}; requests with more than one committed result: ${twice} of ${ids.length}`);
    expect([...counts.keys()].sort()).toEqual([...ids].sort());
    expect(twice).toBe(0);
  }, 180_000);
});
