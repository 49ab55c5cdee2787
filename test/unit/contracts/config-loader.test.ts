import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  effectiveGears,
  effectiveQueueDelaysMs,
  loadFleetConfig,
  loadModelConfig,
  parseModelConfig,
} from '../../../src/contracts/index.ts';
import { parseFleetConfig, settingFix, settingOrigin } from '../../../src/contracts/config-loader.ts';
import { redisTlsOptions } from '../../../src/transport/bullmq/redis-connection.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { stringify } from 'yaml';
import { tempDir } from '../../helpers/temp-dir.ts';

function tmpFile(name: string, text: string): string {
  const dir = tempDir('npu-fleet-cfg-');
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

const minimalModel = {
  name: 'mlp',
  inputs: [{ name: 'input', dtype: 'float32', dims: [-1, 64] }],
  outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 10] }],
};

describe('fleet config loader', () => {
  it('gives defaults with no file', () => {
    const c = loadFleetConfig({ env: {} });
    expect(c.transport.kind).toBe('memory');
    expect(c.devices.count).toBe(2);
    expect(c.worker.drainTimeoutMs).toBe(30_000);
  });

  it('reads YAML and applies NPU_FLEET__ env overrides on top', () => {
    const file = tmpFile(
      'fleet.yaml',
      'transport:\n  kind: kafka\n  kafka:\n    brokers: ["a:9092"]\nworker:\n  drainTimeoutMs: 1000\n',
    );
    const c = loadFleetConfig({
      file,
      env: { NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS: '2500', NPU_FLEET__TRANSPORT__KAFKA__BROKERS: 'b:1,c:2' },
    });
    expect(c.worker.drainTimeoutMs).toBe(2500);
    expect(c.transport.kind === 'kafka' && c.transport.kafka.brokers).toEqual(['b:1', 'c:2']);
  });

  it('says a missing section is required, with the right article', () => {
    const file = tmpFile('no-kafka.yaml', 'transport:\n  kind: kafka\n');
    expect(() => loadFleetConfig({ file, env: {} })).toThrow(/transport\.kafka: .*received undefined \(it is required: add it as an object\)/);
  });

  it('names the bad field and the fix', () => {
    const file = tmpFile('bad.yaml', 'worker:\n  drainTimeoutMs: -5\ndevices:\n  backend: gpu\n');
    let err: unknown;
    try {
      loadFleetConfig({ file, env: {} });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FleetError);
    const fe = err as FleetError;
    expect(fe.code).toBe('INVALID_CONFIG');
    expect(fe.message).toContain('worker.drainTimeoutMs');
    expect(fe.message).toContain('devices.backend');
    expect(fe.message).toMatch(/use one of "auto", "sim", "ascend"/);
    expect(fe.message).toContain(file);
  });

  it('refuses a restart backoff whose minimum exceeds its maximum, naming both fields', () => {
    const file = tmpFile('backoff.yaml', 'supervisor:\n  restartBackoffMinMs: 60000\n');
    expect(() => loadFleetConfig({ file, env: {} })).toThrow(/supervisor\.restartBackoffMinMs.*raise supervisor\.restartBackoffMaxMs/);
    expect(loadFleetConfig({ file: tmpFile('ok.yaml', 'supervisor:\n  restartBackoffMinMs: 30000\n'), env: {} }).supervisor.restartBackoffMinMs).toBe(30_000);
  });

  it('refuses an unknown (misspelt) key, naming it, instead of silently using the default', () => {
    const file = tmpFile('typo.yaml', 'worker:\n  metricPort: 9100\n');
    expect(() => loadFleetConfig({ file, env: {} })).toThrow(/worker: Unrecognized key: "metricPort" \(did you mean metricsPort\? rename it, or remove it\)/);
    expect(() => loadFleetConfig({ env: { NPU_FLEET__SUPERVISOR__RESTART_BACKOFF_MS: '5' } })).toThrow(/supervisor: Unrecognized key: "restartBackoffMs"/);
    expect(() => loadFleetConfig({ file: tmpFile('t.yaml', 'transport:\n  kind: kafka\n  kafak: {}\n'), env: {} })).toThrow(/transport: Unrecognized key: "kafak" \(did you mean kafka\?/);
  });

  it("ignores the section of a transport the kind does not use (one env can switch with kind)", () => {
    const env = { NPU_FLEET__TRANSPORT__KAFKA__BROKERS: 'k:9092', NPU_FLEET__TRANSPORT__BULLMQ__REDIS_URL: 'redis://r:6379' };
    const bull = loadFleetConfig({ env: { ...env, NPU_FLEET__TRANSPORT__KIND: 'bullmq' } });
    expect(bull.transport.kind === 'bullmq' && bull.transport.bullmq.redisUrl).toBe('redis://r:6379');
    const kafka = loadFleetConfig({ env: { ...env, NPU_FLEET__TRANSPORT__KIND: 'kafka' } });
    expect(kafka.transport.kind === 'kafka' && kafka.transport.kafka.brokers).toEqual(['k:9092']);
  });

  it('takes Kafka TLS and SASL settings; a credential from the environment stays text even when it is all digits', () => {
    const file = tmpFile('secure.yaml', 'transport:\n  kind: kafka\n  kafka:\n    brokers: [k:9093]\n    ssl: true\n    sasl: { mechanism: scram-sha-512, username: svc }\n');
    const c = loadFleetConfig({ file, env: { NPU_FLEET__TRANSPORT__KAFKA__SASL__PASSWORD: '0012345' } });
    expect(c.transport.kind === 'kafka' && c.transport.kafka.sasl).toEqual({ mechanism: 'scram-sha-512', username: 'svc', password: '0012345' });
    const digits = loadFleetConfig({ file, env: { NPU_FLEET__TRANSPORT__KAFKA__SASL__PASSWORD: '12345' } });
    expect(digits.transport.kind === 'kafka' && digits.transport.kafka.sasl?.password).toBe('12345');
    expect(() => loadFleetConfig({ file, env: {} })).toThrow(
      /transport\.kafka\.sasl\.password: .*\(it is required: add it as a string, or better set NPU_FLEET__TRANSPORT__KAFKA__SASL__PASSWORD\)/,
    );
  });

  it('keeps the rest of a section the file sets when a CLI flag overrides one key of it (start --devices N)', () => {
    const file = tmpFile('devices.yaml', 'devices:\n  count: 8\n  backend: sim\nworker:\n  drainTimeoutMs: 1000\n');
    const c = loadFleetConfig({ file, env: {}, overrides: { devices: { count: 2 } } });
    expect(c.devices).toEqual({ count: 2, backend: 'sim' });
    expect(c.worker.drainTimeoutMs).toBe(1000);
  });

  it('lets a command-line flag win over the environment, as it wins over the file', () => {
    const c = loadFleetConfig({ env: { NPU_FLEET__DEVICES__COUNT: '8', NPU_FLEET__DEVICES__BACKEND: 'sim' }, overrides: { devices: { count: 1 } } });
    expect(c.devices).toEqual({ count: 1, backend: 'sim' });
  });

  it('reads an environment value as the type its field has: text stays text, lists split on commas', () => {
    const kafka = { NPU_FLEET__TRANSPORT__KIND: 'kafka', NPU_FLEET__TRANSPORT__KAFKA__BROKERS: 'k:9092' };
    const sasl = { ...kafka, NPU_FLEET__TRANSPORT__KAFKA__SASL__MECHANISM: 'plain', NPU_FLEET__TRANSPORT__KAFKA__SASL__USERNAME: 'svc' };
    // Read as JSON numbers, these passwords came back as 12345678901234567000, 1.5 and 1000: a
    // correct password refused by the broker.
    for (const password of ['12345678901234567890', '1.50', '1e3', 'null', 'true']) {
      const c = loadFleetConfig({ env: { ...sasl, NPU_FLEET__TRANSPORT__KAFKA__SASL__PASSWORD: password } });
      expect(c.transport.kind === 'kafka' && c.transport.kafka.sasl?.password).toBe(password);
    }
    const text = loadFleetConfig({
      env: { ...kafka, NPU_FLEET__MODEL_REPOSITORY: '2024', NPU_FLEET__TRANSPORT__KAFKA__GROUP_ID: '42', NPU_FLEET__TRANSPORT__KAFKA__CLIENT_ID: 'false' },
    });
    expect(text.modelRepository).toBe('2024');
    expect(text.transport.kind === 'kafka' && [text.transport.kafka.groupId, text.transport.kafka.clientId]).toEqual(['42', 'false']);
    expect(loadFleetConfig({ env: { NPU_FLEET__MODELS: 'mlp, resnet' } }).models).toEqual(['mlp', 'resnet']);
    expect(loadFleetConfig({ env: { NPU_FLEET__MODELS: '["mlp"]' } }).models).toEqual(['mlp']);
    // Numbers, booleans and a boolean-or-object still parse as before.
    const typed = loadFleetConfig({ env: { ...kafka, NPU_FLEET__WORKER__METRICS_PORT: '9500', NPU_FLEET__TRANSPORT__KAFKA__SSL: 'true', NPU_FLEET__DEMO__ENABLED: 'true' } });
    expect([typed.worker.metricsPort, typed.transport.kind === 'kafka' && typed.transport.kafka.ssl, typed.demo.enabled]).toEqual([9500, true, true]);
  });

  it('names the environment variable a bad value came from, never its value', () => {
    const file = tmpFile('fine.yaml', 'worker:\n  drainTimeoutMs: 1000\n');
    const bad = (env: Record<string, string>): string => {
      try {
        loadFleetConfig({ file, env });
      } catch (e) {
        return (e as Error).message;
      }
      return 'no error';
    };
    const msg = bad({ NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS: '5s', NPU_FLEET__LOG__LEVEL: 'info' });
    expect(msg).toMatch(/worker\.drainTimeoutMs \(set by NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS\): /);
    expect(msg).not.toContain('NPU_FLEET__LOG__LEVEL');
    expect(bad({ NPU_FLEET__WORKER__METRIC_PORT: '1' })).toMatch(/Unrecognized key: "metricPort".*NPU_FLEET__WORKER__METRIC_PORT/);
    expect(bad({ NPU_FLEET__TRANSPORT__KAFKA__SASL__PASSWORD: 'hunter2' })).not.toContain('hunter2');
    // The variable picked a transport whose settings the file lacks: the missing section is its doing.
    expect(bad({ NPU_FLEET__TRANSPORT__KIND: 'kafka' })).toMatch(/transport\.kafka: .*required.*set by the environment: NPU_FLEET__TRANSPORT__KIND/);
    // ... but a bad value inside a section the file does give stays the file's.
    const kafkaFile = tmpFile('kafka.yaml', 'transport:\n  kind: kafka\n  kafka: { brokers: [a:1], sessionTimeoutMs: -1 }\n');
    expect(() => loadFleetConfig({ file: kafkaFile, env: { NPU_FLEET__TRANSPORT__KIND: 'kafka' } })).toThrow(/^(?![\s\S]*NPU_FLEET__)[\s\S]*sessionTimeoutMs/);
    // A value from the file is not blamed on the environment.
    expect(() => loadFleetConfig({ file: tmpFile('neg.yaml', 'worker:\n  drainTimeoutMs: -1\n'), env: { NPU_FLEET__WORKER__HANG_LIMIT_MS: '100' } })).toThrow(
      /^(?![\s\S]*NPU_FLEET__)[\s\S]*worker\.drainTimeoutMs/,
    );
  });

  it('takes the default modelRepository from the install (the package root), an explicit relative one as given', () => {
    const root = new URL('../../../', import.meta.url).pathname.replace(/\/$/, '');
    expect(loadFleetConfig({ env: {} }).modelRepository).toBe(join(root, 'examples/models'));
    expect(loadFleetConfig({ env: { NPU_FLEET__MODEL_REPOSITORY: 'models' } }).modelRepository).toBe('models');
    expect(loadFleetConfig({ file: tmpFile('rel.yaml', 'modelRepository: examples/models\n'), env: {} }).modelRepository).toBe('examples/models');
  });

  // A TLS file named by a variable that cannot be read: the error named the field alone, and the file does not hold it.
  it('says where a setting came from for a section of the config too (a Redis TLS file set by a variable)', () => {
    const env = { NPU_FLEET__TRANSPORT__KIND: 'bullmq', NPU_FLEET__TRANSPORT__BULLMQ__REDIS_URL: 'redis://r:1', NPU_FLEET__TRANSPORT__BULLMQ__TLS__CA_FILE: '/nonexistent/ca.pem' };
    const config = loadFleetConfig({ env });
    const tls = config.transport.kind === 'bullmq' ? config.transport.bullmq.tls : undefined;
    expect(settingOrigin(tls ?? {}, ['caFile'])).toEqual({ kind: 'env', variable: 'NPU_FLEET__TRANSPORT__BULLMQ__TLS__CA_FILE' });
    expect(() => redisTlsOptions(tls)).toThrow(
      'transport.bullmq.tls.caFile: cannot read /nonexistent/ca.pem (ENOENT); transport.bullmq.tls.caFile was set by the environment variable NPU_FLEET__TRANSPORT__BULLMQ__TLS__CA_FILE: fix NPU_FLEET__TRANSPORT__BULLMQ__TLS__CA_FILE or unset it',
    );
  });

  it('tells which layer set a setting (flag, variable, file or default) and words the fix for it', () => {
    const file = tmpFile('origin.yaml', 'modelRepository: /srv/models\ntransport:\n  kind: kafka\n  kafka: { brokers: [a:1], ssl: { caFile: /ca.pem } }\n');
    const env = { NPU_FLEET__TRANSPORT__KAFKA__SSL: '{"caFile":"/other.pem"}', NPU_FLEET__DEVICES__COUNT: '3' };
    const config = loadFleetConfig({ file, env, overrides: { worker: { drainTimeoutMs: 5 } } });
    expect(settingOrigin(config, ['modelRepository'])).toEqual({ kind: 'file', file });
    expect(settingOrigin(config, ['transport', 'kafka', 'ssl', 'caFile'])).toEqual({ kind: 'env', variable: 'NPU_FLEET__TRANSPORT__KAFKA__SSL' });
    expect(settingOrigin(config, ['devices', 'count'])).toEqual({ kind: 'env', variable: 'NPU_FLEET__DEVICES__COUNT' });
    expect(settingOrigin(config, ['worker', 'drainTimeoutMs'])).toEqual({ kind: 'flag' });
    expect(settingOrigin(config, ['worker', 'hangLimitMs'])).toEqual({ kind: 'default', file });
    expect(settingFix(config, ['transport', 'kafka', 'ssl', 'caFile'])).toBe(
      'transport.kafka.ssl.caFile was set by the environment variable NPU_FLEET__TRANSPORT__KAFKA__SSL: fix NPU_FLEET__TRANSPORT__KAFKA__SSL or unset it',
    );
    expect(settingFix(config, ['modelRepository'])).toBe(`set modelRepository in the fleet config ${file}`);
    expect(settingFix(config, ['worker', 'hangLimitMs'])).toBe(`worker.hangLimitMs is its default: set it in the fleet config ${file} or with NPU_FLEET__WORKER__HANG_LIMIT_MS`);
    // A config not read by the loader: the plain fix.
    expect(settingFix(parseFleetConfig({}), ['modelRepository'])).toBe('set modelRepository in the fleet config');
  });

  // The line began "invalid fleet config FILE: devices.count: ...", as if the file held the value.
  it('puts the variable beside each field whose bad value it set, before the message and the fix', () => {
    const file = tmpFile('fine2.yaml', 'worker:\n  drainTimeoutMs: 1000\n');
    let msg = 'no error';
    try {
      loadFleetConfig({ file, env: { NPU_FLEET__DEVICES__COUNT: 'abc', NPU_FLEET__WORKER__HANG_LIMIT_MS: '-1' } });
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/devices\.count \(set by NPU_FLEET__DEVICES__COUNT\): .*\(set it to a number\)/);
    expect(msg).toMatch(/worker\.hangLimitMs \(set by NPU_FLEET__WORKER__HANG_LIMIT_MS\): /);
    // A field the file set is not given a variable.
    expect(() => loadFleetConfig({ file: tmpFile('neg2.yaml', 'worker:\n  drainTimeoutMs: -1\n'), env: { NPU_FLEET__DEVICES__COUNT: '1' } })).toThrow(/worker\.drainTimeoutMs: /);
  });

  it('refuses a list variable written as a JSON array that does not parse, naming it, instead of splitting it on commas', () => {
    const message = (env: Record<string, string>): string => {
      try {
        return JSON.stringify(loadFleetConfig({ env }).models);
      } catch (e) {
        return `${(e as FleetError).code}: ${(e as Error).message}`;
      }
    };
    // Split on commas these became the model names ["'mlp'", "'resnet']"] and ['["mlp"'].
    for (const value of ["['mlp','resnet']", '["mlp"', '["mlp", resnet]']) {
      expect(message({ NPU_FLEET__MODELS: value }), value).toMatch(
        /^INVALID_CONFIG: NPU_FLEET__MODELS \(models\) starts with \[ but is not a JSON array: write a comma list \(a,b\) or a JSON array with double quotes \(\["a","b"\]\)$/,
      );
    }
    // A bracketed IPv6 broker is a comma-list item, not JSON.
    const brokers = loadFleetConfig({ env: { NPU_FLEET__TRANSPORT__KIND: 'kafka', NPU_FLEET__TRANSPORT__KAFKA__BROKERS: '[::1]:9092,[fe80::1]:9093' } });
    expect(brokers.transport.kind === 'kafka' && brokers.transport.kafka.brokers).toEqual(['[::1]:9092', '[fe80::1]:9093']);
  });

  it('names the variable to set when a camelCase key was written without its underscores', () => {
    const message = (env: Record<string, string>): string => {
      try {
        loadFleetConfig({ env });
      } catch (e) {
        return (e as Error).message;
      }
      return 'no error';
    };
    // The key worker.drainTimeoutMs is spelt DRAIN_TIMEOUT_MS; DRAINTIMEOUTMS reads as an unknown key.
    expect(message({ NPU_FLEET__WORKER__DRAINTIMEOUTMS: '5000' })).toMatch(/NPU_FLEET__WORKER__DRAINTIMEOUTMS.*set NPU_FLEET__WORKER__DRAIN_TIMEOUT_MS/);
    expect(message({ NPU_FLEET__MODELREPOSITORY: '/srv/models' })).toMatch(/set NPU_FLEET__MODEL_REPOSITORY/);
    expect(
      message({ NPU_FLEET__TRANSPORT__KIND: 'kafka', NPU_FLEET__TRANSPORT__KAFKA__BROKERS: 'a:1', NPU_FLEET__TRANSPORT__KAFKA__REPLYTOPICPATTERN: 'x' }),
    ).toMatch(/set NPU_FLEET__TRANSPORT__KAFKA__REPLY_TOPIC_PATTERN/);
    // A key that matches nothing gets no made-up suggestion.
    expect(message({ NPU_FLEET__WORKER__COLOUR: 'red' })).not.toMatch(/ set NPU_FLEET__/);
  });

  // These become setTimeout delays as given, and Node fires a delay past 2^31 - 1 ms after 1 ms:
  // transport.bullmq.connectTimeoutMs 3000000000 failed every worker start against a live Redis at
  // once ('did not answer within 3000000000 ms'), a restart backoff that large restarted at once.
  it.each([
    ['transport.bullmq.connectTimeoutMs', { transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://r:6379', connectTimeoutMs: 3e9 } } }],
    ['transport.bullmq.lockDurationMs', { transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://r:6379', lockDurationMs: 5e9 } } }],
    ['supervisor.restartBackoffMinMs', { supervisor: { restartBackoffMinMs: 3e9, restartBackoffMaxMs: 4e9 } }],
    ['supervisor.restartBackoffMaxMs', { supervisor: { restartBackoffMaxMs: 3e9 } }],
    ['worker.publishLingerMs', { worker: { publishLingerMs: 3e9 } }],
  ])('refuses %s past the longest timer Node keeps (2147483647 ms), naming the field and the bound', (field, config) => {
    const file = tmpFile('timer.yaml', stringify(config));
    expect(() => loadFleetConfig({ file, env: {} })).toThrow(new RegExp(`${field.replace(/\./g, '\\.')}: .*24\\.8 days.*\\(use a value <= 2147483647\\)`));
  });

  // redisUrl http://127.0.0.1:6391 passed: ioredis read it as a Unix socket path (connect ENOENT
  // //127.0.0.1:6391) while the error said 'Redis at 127.0.0.1:6391 did not answer', and under
  // `start` each worker exited 1 and was restarted for good.
  it('refuses a redisUrl that is not redis:// or rediss://, naming the field and the scheme, never the password', () => {
    const message = (redisUrl: string): string => {
      try {
        loadFleetConfig({ file: tmpFile('url.yaml', stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl } } })), env: {} });
      } catch (e) {
        return `${(e as FleetError).code}: ${(e as Error).message}`;
      }
      return 'no error';
    };
    expect(message('http://127.0.0.1:6391')).toMatch(/^INVALID_CONFIG: invalid fleet config .*: transport\.bullmq\.redisUrl: must be a redis:\/\/ or rediss:\/\/ URL \(got scheme http:\); write it as redis:\/\/\[user:password@\]host:port\[\/db\]$/);
    expect(message('unix:///var/run/redis.sock')).toMatch(/transport\.bullmq\.redisUrl: must be a redis:\/\/ or rediss:\/\/ URL \(got scheme unix:\)/);
    const noScheme = message('fleet:hunter2@127.0.0.1:6379');
    expect(noScheme).toMatch(/transport\.bullmq\.redisUrl: must be a redis:\/\/ or rediss:\/\/ URL \(got no scheme\)/);
    expect(noScheme).not.toContain('hunter2');
    expect(message('https://fleet:hunter2@redis.example.com:6380')).not.toContain('hunter2');
    // From the environment too, naming the variable and never its value.
    let fromEnv = '';
    try {
      loadFleetConfig({ env: { NPU_FLEET__TRANSPORT__KIND: 'bullmq', NPU_FLEET__TRANSPORT__BULLMQ__REDIS_URL: 'http://fleet:hunter2@r:6379' } });
    } catch (e) {
      fromEnv = (e as Error).message;
    }
    expect(fromEnv).toMatch(/transport\.bullmq\.redisUrl \(set by NPU_FLEET__TRANSPORT__BULLMQ__REDIS_URL\): must be a redis:\/\/ or rediss:\/\/ URL \(got scheme http:\)/);
    expect(fromEnv).not.toContain('hunter2');
    for (const ok of ['redis://r:6379', 'rediss://fleet:pw@r:6380/2', 'REDIS://r:6379', 'redis://:pw@r']) {
      expect(message(ok), ok).toBe('no error');
    }
  });

  // brokers: [kafka] (no port) passed: under `start` each worker logged kafkajs's 'Port should be >=
  // 0 and < 65536. Received type number (NaN)' on every retry, naming no setting, and was
  // restarted for good.
  it('refuses a Kafka broker that is not host:port, naming the field and the entry', () => {
    const message = (brokers: string[], env: Record<string, string> = {}): string => {
      try {
        loadFleetConfig({ file: tmpFile('brokers.yaml', stringify({ transport: { kind: 'kafka', kafka: { brokers } } })), env });
      } catch (e) {
        return `${(e as FleetError).code}: ${(e as Error).message}`;
      }
      return 'no error';
    };
    expect(message(['kafka-0:9092', 'kafka-1'])).toMatch(/^INVALID_CONFIG: invalid fleet config .*: transport\.kafka\.brokers\[1\]: must be host:port \(got "kafka-1": no port\), e\.g\. kafka-1:9092$/);
    expect(message(['kafka-0:90x2'])).toMatch(/transport\.kafka\.brokers\[0\]: must be host:port \(got "kafka-0:90x2": port 90x2 is not a number from 1 to 65535\)/);
    expect(message(['kafka-0:70000'])).toMatch(/transport\.kafka\.brokers\[0\]: must be host:port \(got "kafka-0:70000": port 70000 is not a number from 1 to 65535\)/);
    expect(message(['kafka://kafka-0:9092'])).toMatch(/transport\.kafka\.brokers\[0\]: must be host:port/);
    expect(message([':9092'])).toMatch(/transport\.kafka\.brokers\[0\]: must be host:port \(got ":9092": no host\)/);
    expect(message(['x'], { NPU_FLEET__TRANSPORT__KAFKA__BROKERS: 'k0:9092,k1' })).toMatch(/transport\.kafka\.brokers\[1\] \(set by NPU_FLEET__TRANSPORT__KAFKA__BROKERS\): must be host:port \(got "k1": no port\)/);
    for (const ok of [['k:9092'], ['10.0.0.5:9092', 'kafka-1.kafka.svc.cluster.local:19093'], ['[::1]:9092']]) expect(message(ok), ok.join()).toBe('no error');
  });

  // An empty prefix made every BullMQ key start with ':' (':mlp.requests:wait').
  it('refuses an empty transport.bullmq.prefix, naming the field and the fix', () => {
    const file = tmpFile('prefix.yaml', stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://r:6379', prefix: '' } } }));
    expect(() => loadFleetConfig({ file, env: {} })).toThrow(
      /transport\.bullmq\.prefix: must not be empty \(every key would start with ':'\): name a prefix, or leave prefix out for the default npu-fleet$/,
    );
  });

  it('still takes worker bounds past the timer maximum, which wait the maximum (practically never)', () => {
    const c = loadFleetConfig({ file: tmpFile('never.yaml', 'worker: { drainTimeoutMs: 1.0e12, hangLimitMs: 1.0e12, startTimeoutMs: 1.0e12 }\n'), env: {} });
    expect(c.worker.hangLimitMs).toBe(1e12);
  });

  // A file named by a leftover $NPU_FLEET_CONFIG was reported as 'cannot read fleet config X: ENOENT ...',
  // which names neither where the path came from nor what to do, to a user who gave no --config.
  it('says where a config path it cannot read came from (--config or $NPU_FLEET_CONFIG) and what to do', () => {
    expect(() => loadFleetConfig({ env: { NPU_FLEET_CONFIG: '/nonexistent/fleet.yaml' } })).toThrow(
      /cannot read fleet config \/nonexistent\/fleet\.yaml \(named by \$NPU_FLEET_CONFIG\): no such file.*fix NPU_FLEET_CONFIG or unset it/,
    );
    expect(() => loadFleetConfig({ file: '/nonexistent/fleet.yaml', env: {} })).toThrow(/cannot read fleet config \/nonexistent\/fleet\.yaml: no such file.*give the path of a YAML file/);
    const dir = tempDir('npu-fleet-cfg-dir-');
    expect(() => loadFleetConfig({ file: dir, env: {} })).toThrow(/is a directory.*give the path of a YAML file/);
  });

  // An empty models list passed and filtered every model out: the worker then failed with 'no
  // servable model in examples/models; run npu-fleet models validate', which passes and says nothing of models.
  it('refuses an empty models list, naming models and the fix, instead of serving no model', () => {
    expect(() => loadFleetConfig({ file: tmpFile('none.yaml', 'models: []\n'), env: {} })).toThrow(/models: an empty list serves no model: list the model names, or leave models out to serve all/);
    expect(loadFleetConfig({ file: tmpFile('one.yaml', 'models: [mlp]\n'), env: {} }).models).toEqual(['mlp']);
  });

  // Device N listens on metricsPort + N: past 65535 that worker cannot start. Under a supervised
  // `start` it exited 2 at every start and was restarted with backoff for good.
  it('refuses a metricsPort whose last device would listen past 65535, naming both fields', () => {
    expect(() => loadFleetConfig({ file: tmpFile('port.yaml', 'worker: { metricsPort: 65535 }\ndevices: { count: 2 }\n'), env: {} })).toThrow(
      /worker\.metricsPort: device 1 would listen on 65536 \(metricsPort \+ device\): use a value <= 65534, or fewer devices\.count/,
    );
    expect(loadFleetConfig({ file: tmpFile('port1.yaml', 'worker: { metricsPort: 65535 }\ndevices: { count: 1 }\n'), env: {} }).worker.metricsPort).toBe(65535);
    expect(loadFleetConfig({ file: tmpFile('port0.yaml', 'worker: { metricsPort: 0 }\ndevices: { count: 64 }\n'), env: {} }).worker.metricsPort).toBe(0);
  });

  // The line named was the one after the mistake for an unclosed quote or bracket (past the end
  // of the file when it was the last line), and the one before it for an over-indented key.
  it('names the line of a YAML mistake itself, not the one after or before it', () => {
    const at = (text: string): string => {
      try {
        loadFleetConfig({ file: tmpFile('y.yaml', text), env: {} });
      } catch (e) {
        return / at (line \d+, column \d+)/.exec((e as Error).message)?.[1] ?? (e as Error).message;
      }
      return 'no error';
    };
    expect(at('devices: { count: 1 }\nmodels: [a, b\n')).toBe('line 2, column 14');
    expect(at('models: [a, b\ndevices: { count: 1 }\n')).toBe('line 1, column 14');
    expect(at('log:\n  level: "info\n')).toBe('line 2, column 10');
    expect(at('transport:\n  kind: kafka\n   kafka: {}\n')).toMatch(/^line 3, column \d+$/);
    // Already right: a key out of line with its siblings, a key without its colon.
    expect(at('worker:\n  drainTimeoutMs: 5\n hangLimitMs: 5\n')).toBe('line 3, column 1');
    expect(at('worker: {}\nlog\ndevices: {}\n')).toBe('line 2, column 1');
  });

  it('reports unreadable files and bad YAML clearly', () => {
    expect(() => loadFleetConfig({ file: '/nonexistent/fleet.yaml', env: {} })).toThrow(/cannot read fleet config/);
    expect(() => loadFleetConfig({ file: tmpFile('x.yaml', 'a: [1,'), env: {} })).toThrow(/not valid YAML/);
  });
});

describe('model config', () => {
  it('applies defaults beside the schema', () => {
    const c = parseModelConfig(minimalModel);
    expect(c.maxBatchSize).toBe(32);
    expect(effectiveGears(c)).toEqual([1, 2, 4, 8, 16, 32]);
    expect(effectiveQueueDelaysMs(c)).toEqual([0, 5, 10]);
    expect(c.lateResults).toBe('deliver');
  });

  it.each([
    [{ ...minimalModel, defaultPriority: 3 }, 'defaultPriority'],
    [{ ...minimalModel, maxQueueDelayMs: [0, 1] }, 'maxQueueDelayMs'],
    [{ ...minimalModel, batchGears: [4, 2] }, 'batchGears'],
    [{ ...minimalModel, batchGears: [1, 64] }, 'batchGears'],
    [{ ...minimalModel, queue: { softLimitItems: 10, hardLimitItems: 5 } }, 'queue.softLimitItems'],
    [{ ...minimalModel, buckets: { input: 'nope', axis: 1, bounds: [8] } }, 'buckets.input'],
    [{ ...minimalModel, name: 'has space' }, 'name'],
    [{ ...minimalModel, maxQueueDelay: [0, 1, 2] }, '(root)'],
    [{ ...minimalModel, queue: { softLimit: 10 } }, 'queue'],
  ])('rejects bad model config %#', (value, field) => {
    expect(() => parseModelConfig(value)).toThrow(new RegExp(field.replace(/[.[\]()]/g, '\\$&') + ':'));
  });

  it('loads a YAML file', () => {
    const file = tmpFile('config.yaml', 'name: mlp\ninputs: [{name: input, dtype: float32, dims: [-1, 4]}]\noutputs: [{name: y, dtype: float32, dims: [-1, 2]}]\nbatchGears: [1, 4, 8]\nmaxBatchSize: 8\n');
    expect(effectiveGears(loadModelConfig(file))).toEqual([1, 4, 8]);
  });
});
