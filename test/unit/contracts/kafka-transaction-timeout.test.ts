import { describe, expect, it } from 'vitest';
import { loadFleetConfig } from '../../../src/contracts/index.ts';

// transport.kafka.transactionTimeoutMs: the exactly-once worker's transaction timeout (kafkajs's
// transactionTimeout), read from the file or NPU_FLEET__ env like any setting.
describe('transport.kafka.transactionTimeoutMs', () => {
  const kafka = (env: Record<string, string>) => loadFleetConfig({ env: { NPU_FLEET__TRANSPORT__KIND: 'kafka', NPU_FLEET__TRANSPORT__KAFKA__BROKERS: 'a:9092', ...env } });
  const timeoutOf = (env: Record<string, string>): number | undefined => {
    const t = kafka(env).transport;
    return t.kind === 'kafka' ? t.kafka.transactionTimeoutMs : undefined;
  };

  it("defaults to kafkajs's and the Java client's 60 s", () => {
    expect(timeoutOf({})).toBe(60_000);
  });

  it('takes a shorter or longer timeout', () => {
    expect(timeoutOf({ NPU_FLEET__TRANSPORT__KAFKA__TRANSACTION_TIMEOUT_MS: '10000' })).toBe(10_000);
    expect(timeoutOf({ NPU_FLEET__TRANSPORT__KAFKA__TRANSACTION_TIMEOUT_MS: '900000' })).toBe(900_000);
  });

  it('refuses one under a second (every transaction of a loaded worker would be aborted), naming the setting', () => {
    expect(() => kafka({ NPU_FLEET__TRANSPORT__KAFKA__TRANSACTION_TIMEOUT_MS: '500' })).toThrow(/transport\.kafka\.transactionTimeoutMs/);
  });
});
