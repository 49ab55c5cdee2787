import type { Admin } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { KafkaMessageSizes } from '../../../src/producer/kafka-message-sizes.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';

/** An admin whose DescribeConfigs says every topic takes `maxBytes`. */
const adminWith = (maxBytes: number): Admin =>
  ({
    describeConfigs: ({ resources }: { resources: Array<{ name: string }> }) =>
      Promise.resolve({
        resources: resources.map((r) => ({ resourceName: r.name, errorCode: 0, configEntries: [{ configName: 'max.message.bytes', configValue: String(maxBytes) }] })),
      }),
  }) as unknown as Admin;

describe('KafkaMessageSizes', () => {
  it('refuses a message over its topic max.message.bytes with its index, and the problem of that request alone in details.problem', async () => {
    const sizes = new KafkaMessageSizes();
    const small = { topic: 'm.requests.p0', message: { value: Buffer.alloc(10) }, id: 'a' };
    const big = { topic: 'm.requests.p0', message: { value: Buffer.alloc(200_000) }, id: 'big' };
    let thrown: unknown;
    await sizes.check(adminWith(100_000), [small, big]).catch((e: unknown) => (thrown = e));
    const err = fleetErrorOf(() => {
      throw thrown;
    });
    expect(err.code).toBe('LIMIT_EXCEEDED');
    expect(err.details).toMatchObject({ index: 1, field: 'inputs', topic: 'm.requests.p0', maxMessageBytes: 100_000 });
    expect(err.details['problem']).toMatch(/^it is 200\d{3} bytes on the wire, over max\.message\.bytes \(100000\) of m\.requests\.p0, which the broker would refuse: send fewer samples per request, or raise .*max\.message\.bytes=N\)$/);
    expect(err.message).toMatch(/^request "big" is 200\d{3} bytes on the wire.*; nothing of this publish was sent$/);
  });
});
