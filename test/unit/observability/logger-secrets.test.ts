import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { KafkaSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import { createLogger } from '../../../src/observability/logger.ts';

function capture() {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return { log: createLogger({ level: 'debug', destination: sink }), text: () => lines.join('') };
}

describe('logger: credentials', () => {
  it('a Kafka SASL password is censored wherever a caller puts the settings, at every level', () => {
    const { log, text } = capture();
    const kafka = KafkaSettingsSchema.parse({ brokers: ['b:9092'], sasl: { mechanism: 'plain', username: 'fleet', password: 's3cr3t-SENTINEL' } });
    log.error({ sasl: kafka.sasl }, 'sasl');
    log.warn({ kafka }, 'settings');
    log.info({ transport: { kind: 'kafka', kafka } }, 'transport');
    log.debug({ config: { transport: { kind: 'kafka', kafka } } }, 'config');
    log.debug({ password: 's3cr3t-SENTINEL' }, 'bare');
    expect(text()).not.toContain('s3cr3t-SENTINEL');
    // What is not secret stays readable.
    expect(text()).toContain('"username":"fleet"');
    expect(text()).toContain('"password":"[secret]"');
  });
});
