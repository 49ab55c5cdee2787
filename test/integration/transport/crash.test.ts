// SIGKILL a worker process mid-work (no leave-group, no lock release, nothing graceful): another
// worker gets exactly the requests the dead one had not settled.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { TransportSettings } from '../../../src/contracts/fleet-config.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { createTransport } from '../../../src/transport/index.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { fixtureProcesses } from '../../helpers/spawn-fixture.ts';
import { bullmqSettings } from './bullmq-harness.ts';
import { idOf, Inbox, makeRequest, outcomeFor } from './conformance-kit.ts';
import { kafkaSettings } from './kafka-harness.ts';

const here = dirname(fileURLToPath(import.meta.url));
const spawnFixture = fixtureProcesses();
const transports: Transport[] = [];
afterEach(async () => {
  await Promise.allSettled(transports.splice(0).map((t) => t.close()));
});

const cases: Array<{ name: string; settings: () => TransportSettings; redeliveryMs: number; flag: boolean }> = [
  { name: 'kafka', settings: () => ({ kind: 'kafka', kafka: kafkaSettings({ sessionTimeoutMs: 6_000 }) }), redeliveryMs: 45_000, flag: true },
  { name: 'bullmq', settings: () => ({ kind: 'bullmq', bullmq: bullmqSettings({ lockDurationMs: 2_000 }) }), redeliveryMs: 20_000, flag: true },
];

describe.each(cases)('SIGKILL of a $name worker', ({ settings: makeSettings, redeliveryMs, flag }) => {
  it('its unsettled requests go to another worker; the settled ones do not come back', async () => {
    const settings = makeSettings();
    const model = uniqueName('kill').replace(/-/g, '');
    const producer = createProducer(settings, { partitions: 1 });
    const requests = Array.from({ length: 10 }, (_, i) => makeRequest(model, `k${i}`, 0));
    await producer.publish(requests);
    await producer.close();

    const { child, lines, exited, untilCount } = spawnFixture(join(here, 'fixtures/crash-worker.ts'), [JSON.stringify(settings), model, '4']);
    await untilCount(/^(settled|held) /, 10, 60_000);
    const settledIds = lines.filter((l) => l.startsWith('settled ')).map((l) => l.slice(8));
    const heldIds = lines.filter((l) => l.startsWith('held ')).map((l) => l.slice(5));
    expect(settledIds).toHaveLength(4);
    child.kill('SIGKILL');
    await exited;

    const b = createTransport(settings, { kafka: { partitions: 1 }, bullmq: { stalledIntervalMs: 500 } });
    transports.push(b);
    const inbox = new Inbox();
    await b.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: inbox.onDeliveries });
    const again = await inbox.waitFor(6, redeliveryMs);
    await inbox.quietFor(1_000);
    expect(inbox.all.map(idOf).sort()).toEqual([...heldIds].sort());
    if (flag) expect(again.every((d) => d.redelivered)).toBe(true);
    await b.settle(inbox.all.map(outcomeFor));
  });
});
