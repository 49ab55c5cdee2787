// Kafka behind SASL/PLAIN and behind TLS: the test broker's extra listeners (test/helpers/local-kafka-service.ts).
import { afterEach, describe, expect, it } from 'vitest';
import { KafkaSettingsSchema, type KafkaSettings } from '../../../src/contracts/fleet-config.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { createKafka } from '../../../src/transport/kafka/kafka-client.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { predecessorMembers, removePredecessorMembers } from '../../../src/transport/kafka/predecessor-members.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((c) => c.close()));
});

function saslSettings(password?: string): KafkaSettings {
  const sasl = getServices().kafkaSasl;
  return KafkaSettingsSchema.parse({
    brokers: sasl.brokers,
    groupId: uniqueName('sasl-group'),
    sasl: { mechanism: 'plain', username: sasl.username, password: password ?? sasl.password },
  });
}

/** A worker transport and a producer client on `settings`; one request() round trip through them. */
async function serveOne(settings: KafkaSettings, id: string): Promise<void> {
  const model = uniqueName(id).replace(/-/g, '');
  const t = new KafkaTransport(settings, { partitions: 1 });
  open.push(t);
  await t.start({ subscriptions: [{ model, priorityLevels: 1 }], onDeliveries: (ds) => void t.settle(ds.map(outcomeFor)) });
  const producer = new KafkaProducer(settings, { partitions: 1 });
  open.push(producer);
  const result = await producer.request(makeRequest(model, id, 0), { timeoutMs: 30_000 });
  expect(result.status).toBe('ok');
  expect(result.id).toBe(id);
}

/**
 * A worker transport notes its group member; another client on the same settings (as the next
 * worker of the device would) removes that member with a LeaveGroup through the same TLS / SASL.
 */
async function removesNotedMember(settings: KafkaSettings): Promise<void> {
  let note: string | undefined;
  const t = new KafkaTransport(settings, { partitions: 1 });
  open.push(t);
  await t.start({ subscriptions: [{ model: uniqueName('noted').replace(/-/g, ''), priorityLevels: 1 }], onDeliveries: () => {}, predecessor: { previous: undefined, save: (n) => (note = n) } });
  const members = predecessorMembers(note);
  expect(members).toEqual([{ groupId: settings.groupId, memberId: expect.any(String) }]);
  expect(await removePredecessorMembers(createKafka(settings), members, undefined)).toBe(1);
}

/** What starting a transport on `settings` fails with (one kafkajs retry). */
async function startError(settings: KafkaSettings): Promise<FleetError> {
  const t = new KafkaTransport(settings, { partitions: 1, retries: 1 });
  open.push(t);
  const err: unknown = await startWith(t, uniqueName('bad-start'), new Inbox()).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FleetError);
  return err as FleetError;
}

describe('kafka with SASL/PLAIN', () => {
  it('a worker transport and a producer client log in and serve a request end to end', async () => {
    await serveOne(saslSettings(), 'over-sasl');
  });

  it("the next worker removes a dead one's group member over the same SASL login", async () => {
    await removesNotedMember(saslSettings());
  });

  it('a wrong password fails the start with an error naming transport.kafka.sasl, without the password', async () => {
    const err = await startError(saslSettings('not-the-password'));
    expect(err.message).toMatch(/the brokers refused the SASL login of transport\.kafka\.sasl \(mechanism plain, username fleet\); check the username, password and mechanism/);
    expect(err.message).not.toContain('not-the-password');

    // The listener does require the login: without transport.kafka.sasl nothing gets through.
    const { sasl: _omitted, ...withoutSasl } = saslSettings();
    await startError(KafkaSettingsSchema.parse(withoutSasl));
  });
});

describe('kafka over TLS', () => {
  const tlsSettings = (ssl: KafkaSettings['ssl']): KafkaSettings =>
    KafkaSettingsSchema.parse({ brokers: getServices().kafkaTls.brokers, groupId: uniqueName('tls-group'), ssl });

  it('with the CA of the brokers (transport.kafka.ssl.caFile) a worker and a producer serve a request', async () => {
    await serveOne(tlsSettings({ caFile: getServices().kafkaTls.caFile, rejectUnauthorized: true }), 'over-tls');
  });

  it("the next worker removes a dead one's group member over the same TLS", async () => {
    await removesNotedMember(tlsSettings({ caFile: getServices().kafkaTls.caFile, rejectUnauthorized: true }));
  });

  it('a broker certificate the system CAs do not vouch for fails the start naming transport.kafka.ssl', async () => {
    expect((await startError(tlsSettings(true))).message).toMatch(/TLS to the brokers failed; check transport\.kafka\.ssl/);
  });
});
