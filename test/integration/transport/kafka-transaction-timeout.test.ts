// transport.kafka.transactionTimeoutMs reaches the brokers: the exactly-once worker's transactional
// producer registers its transactional id with that timeout (InitProducerId), which the brokers
// hold to their transaction.max.timeout.ms (15 min by default).
import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { uniqueName } from '../../helpers/services.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from './conformance-kit.ts';
import { kafkaSettings } from './kafka-harness.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

/** Settles one request's outcome on an exactly-once transport with `transactionTimeoutMs`: what the settle came to within 20 s. */
async function settleOne(transactionTimeoutMs: number): Promise<unknown> {
  const settings = kafkaSettings({ exactlyOnce: true, transactionTimeoutMs });
  const model = uniqueName('txtimeout').replace(/-/g, '');
  const producer = new KafkaProducer(settings, { partitions: 1 });
  open.push(producer);
  const t = new KafkaTransport(settings, { partitions: 1, retries: 1 });
  open.push(t);
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  await producer.publish([makeRequest(model, 'tx-1', 0)]);
  const [delivery] = await inbox.waitFor(1, 30_000);
  const settled = await Promise.race([
    t.settle([outcomeFor(delivery as never)]).then(
      () => 'settled',
      (e: unknown) => e,
    ),
    new Promise((r) => setTimeout(() => r('still settling after 20 s'), 20_000)),
  ]);
  return settled;
}

describe('transport.kafka.transactionTimeoutMs', () => {
  it('a timeout the brokers allow: the result goes out in a transaction', async () => {
    const settled = await settleOne(10_000);
    expect(settled).toBe('settled');
  }, 60_000);

  it('a timeout above the brokers\' transaction.max.timeout.ms (15 min): the transaction is refused, so the setting is what the brokers get', async () => {
    const settled = await settleOne(900_001);
    expect(settled).toBeInstanceOf(FleetError);
    expect((settled as FleetError).details).toMatchObject({ kafkaError: 'INVALID_TRANSACTION_TIMEOUT' });
  }, 60_000);
});
