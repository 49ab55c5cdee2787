import { describe, expect, it } from 'vitest';
import { loadFleetConfig, parseFleetConfig, parseModelConfig } from '../../../src/contracts/config-loader.ts';

function message(parse: () => unknown): string {
  try {
    parse();
  } catch (e) {
    return (e as Error).message;
  }
  return 'no error';
}

describe('validation error hints', () => {
  // A kind outside a discriminated union (transport.kind, versionPolicy.kind) got the catch-all
  // '(fix the value)', the one hint that does not say what to write.
  it('tells a bad or missing kind of a discriminated union which kinds there are', () => {
    expect(message(() => parseFleetConfig({ transport: { kind: 'rabbitmq' } }))).toMatch(/transport\.kind: .*\(use one of "memory", "kafka", "bullmq"\)$/);
    expect(message(() => parseFleetConfig({ transport: {} }))).toMatch(/transport\.kind: .*\(use one of "memory", "kafka", "bullmq"\)$/);
    const model = { name: 'm', inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 2] }] };
    expect(message(() => parseModelConfig({ ...model, versionPolicy: { kind: 'newest' } }))).toMatch(/versionPolicy\.kind: .*\(use one of "latest", "specific"\)$/);
  });

  // A plain union (transport.kafka.ssl: true/false or the TLS files) said only "Invalid input (fix the value)".
  it('says what a plain union field accepts, with the keys of its object form', () => {
    const kafka = (ssl: unknown) => () => parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['a:1'], ssl } } });
    for (const ssl of [5, 'yes', null, ['a']]) {
      expect(message(kafka(ssl))).toMatch(
        /transport\.kafka\.ssl: .* \(use true or false, or an object \{ caFile, certFile, keyFile, rejectUnauthorized \}\)$/,
      );
    }
    // An object with a bad field: the field itself, not the whole union.
    expect(message(kafka({ caFile: 3 }))).toMatch(/transport\.kafka\.ssl\.caFile: .*expected string.* \(set it to a string\)$/);
    expect(message(kafka({ certFile: '/c.pem' }))).toMatch(/transport\.kafka\.ssl\.keyFile: certFile and keyFile go together/);
    expect(message(kafka(5))).not.toContain('fix the value');
  });

  // worker.drainTimeout and kafka.groupID were reported as unknown keys with no word of the key meant.
  it('suggests the key meant for a misspelt one: another case, a missing unit suffix, a slip of a letter or two', () => {
    expect(message(() => parseFleetConfig({ worker: { drainTimeout: 5 } }))).toMatch(/worker: Unrecognized key: "drainTimeout" \(did you mean drainTimeoutMs\? rename it, or remove it\)$/);
    expect(message(() => parseFleetConfig({ worker: { drainTimeoutMS: 5 } }))).toMatch(/did you mean drainTimeoutMs\?/);
    expect(message(() => parseFleetConfig({ worker: { drianTimeoutMs: 5 } }))).toMatch(/did you mean drainTimeoutMs\?/);
    expect(message(() => parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['a:1'], groupID: 'g' } } }))).toMatch(
      /transport\.kafka: Unrecognized key: "groupID" \(did you mean groupId\? rename it, or remove it\)$/,
    );
    expect(message(() => parseFleetConfig({ limits: { maxMessage: 5 } }))).toMatch(/did you mean maxMessageBytes\?/);
    // Nothing close: no guess.
    expect(message(() => parseFleetConfig({ worker: { colour: 'red' } }))).toMatch(/"colour" \(remove it or fix its spelling\)$/);
    // Two keys, each with its own suggestion.
    expect(message(() => parseFleetConfig({ worker: { drainTimeout: 5, hangLimit: 5 } }))).toMatch(/"drainTimeout", "hangLimit" \(did you mean drainTimeoutMs for "drainTimeout", hangLimitMs for "hangLimit"\? rename them, or remove them\)$/);
  });

  it('a misspelt key that is the start of one key gets it; set by a variable, the variable meant too', () => {
    expect(message(() => parseFleetConfig({ modelRepo: '/srv/models' }))).toMatch(/Unrecognized key: "modelRepo" \(did you mean modelRepository\?/);
    // Too short a start to tell what was meant: no guess.
    expect(message(() => parseFleetConfig({ mo: 1 }))).toMatch(/"mo" \(remove it or fix its spelling\)/);
    expect(() => loadFleetConfig({ env: { NPU_FLEET__WORKER__DRAIN_TIMEOUT: '5' } })).toThrow(
      /did you mean drainTimeoutMs \(NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS, not NPU_FLEET__WORKER__DRAIN_TIMEOUT\)\?/,
    );
  });

  it('says which environment variable can give a missing SASL password', () => {
    const sasl = { mechanism: 'plain', username: 'u' };
    expect(message(() => parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['a:1'], sasl } } }))).toMatch(
      /transport\.kafka\.sasl\.password: .*\(it is required: add it as a string, or better set NPU_FLEET__TRANSPORT__KAFKA__SASL__PASSWORD\)$/,
    );
  });
});
