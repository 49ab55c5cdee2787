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

describe('logger: credentials inside URLs', () => {
  const URL_WITH_LOGIN = 'redis://fleet:s3cr3t-SENTINEL@10.0.0.5:6379/0';

  it('a URL\'s password is censored in fields, nested settings, the message and its format arguments, at every level', () => {
    const { log, text } = capture();
    log.debug({ redisUrl: URL_WITH_LOGIN }, 'field');
    log.info({ config: { transport: { kind: 'bullmq', bullmq: { redisUrl: URL_WITH_LOGIN, prefix: 'bull' } } } }, 'config');
    log.warn({ targets: [URL_WITH_LOGIN.replace('redis:', 'rediss:'), 'http://proxy-user:s3cr3t-SENTINEL@proxy:3128'] }, 'list');
    log.error(`could not reach ${URL_WITH_LOGIN}; check it`);
    log.error({ model: 'm' }, 'could not reach %s', URL_WITH_LOGIN);
    log.info({ url: new URL(URL_WITH_LOGIN) }, 'URL object');
    // A token alone (scheme://token@host) is the secret itself.
    log.info({ proxy: 'https://s3cr3t-SENTINEL@proxy.example:8443' }, 'token');
    const out = text();
    expect(out).not.toContain('s3cr3t-SENTINEL');
    // Where the URL points and who logs in stay readable.
    expect(out).toContain('redis://fleet:***@10.0.0.5:6379/0');
    expect(out).toContain('rediss://fleet:***@10.0.0.5:6379/0');
    expect(out).toContain('http://proxy-user:***@proxy:3128');
    expect(out).toContain('https://***@proxy.example:8443');
    expect(out).toContain('"prefix":"bull"');
  });

  it('an error whose message, stack or own fields hold such a URL is logged without the password', () => {
    const { log, text } = capture();
    let invalid: unknown;
    try {
      // Node's URL error keeps the whole text it was given as err.input.
      new URL('redis://fleet:s3cr3t-SENTINEL@10.0.0.5:notaport');
    } catch (err) {
      invalid = err;
    }
    expect((invalid as { input?: string }).input).toContain('s3cr3t-SENTINEL');
    log.error({ err: invalid }, 'parsing the URL failed');
    log.error({ err: new Error(`dialing ${URL_WITH_LOGIN} failed`, { cause: invalid }) }, 'with a cause');
    log.warn({ failure: invalid }, 'under another key');
    const out = text();
    expect(out).not.toContain('s3cr3t-SENTINEL');
    expect(out).toContain('"code":"ERR_INVALID_URL"');
    expect(out).toContain('redis://fleet:***@10.0.0.5:notaport');
  });

  it('text without a URL login is left as it was', () => {
    const { log, text } = capture();
    log.info({ where: 'Redis at 10.0.0.5:6379', mail: 'ops@example.com', url: 'https://example.com/a@b' }, 'see https://example.com/x and redis://10.0.0.5:6379');
    const out = text();
    expect(out).toContain('"where":"Redis at 10.0.0.5:6379"');
    expect(out).toContain('"mail":"ops@example.com"');
    expect(out).toContain('see https://example.com/x and redis://10.0.0.5:6379');
  });
});
