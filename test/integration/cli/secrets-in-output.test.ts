// What the real CLI prints (stdout and stderr of `npu-fleet worker` and `npu-fleet dlq list`) must
// never hold a Kafka credential, TLS key material or a request's payload (tensor bytes, meta): logs
// are shipped and kept far more widely than the brokers' own data. Each case plants a sentinel and
// greps the whole output for it.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { encodeRequest } from '../../../src/codec/index.ts';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { freePort } from '../../helpers/service-process.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { Inbox, makeRequest, outcomeFor, startWith } from '../transport/conformance-kit.ts';
import { kafkaSettings } from '../transport/kafka-harness.ts';

const PASSWORD = 's3cr3t-SENTINEL';

function configFile(config: unknown, text?: string): string {
  const file = join(tempDir('npu-fleet-secrets-'), 'fleet.yaml');
  writeFileSync(file, text ?? stringify(config));
  return file;
}

/** `npu-fleet worker` on `file` until it exits (start-up failures) or `until` shows up in its output. */
async function runWorker(file: string, env: Record<string, string>, timeoutMs: number) {
  const w = spawnCli(['worker', '--device', '0', '--config', file], { NPU_FLEET_DEVICE: 'sim', NODE_OPTIONS: '--max-semi-space-size=16', ...env });
  const result = await Promise.race([w.exited, new Promise<'running'>((r) => setTimeout(() => r('running'), timeoutMs))]);
  if (result === 'running') {
    w.child.kill('SIGKILL');
    await w.exited;
  }
  return { result, output: w.output() };
}

function expectNowhere(output: string, secrets: readonly string[]): void {
  for (const s of secrets) expect(output.includes(s), `"${s}" printed:\n${output}`).toBe(false);
}

describe('secrets in what the CLI prints', () => {
  it('a YAML error on the password line of the config does not echo the line', async () => {
    const file = configFile(
      undefined,
      ['transport:', '  kind: kafka', '  kafka:', '    brokers: ["127.0.0.1:1"]', '    sasl:', '      mechanism: plain', '      username: fleet', `      password: ${PASSWORD}: oops`, 'models: [mlp-classifier]', ''].join('\n'),
    );
    const { result, output } = await runWorker(file, {}, 30_000);
    expect(result).toMatchObject({ code: 2 });
    expect(output).toMatch(/fleet config \S+ is not valid YAML: .*line 8, column \d+/);
    expectNowhere(output, [PASSWORD]);
    // An unterminated quote reports the line after the secret; it must not show the quoted text either.
    const quoted = configFile(undefined, ['transport:', '  kind: kafka', '  kafka:', '    brokers: ["127.0.0.1:1"]', '    sasl:', '      mechanism: plain', '      username: fleet', `      password: "${PASSWORD}`, ''].join('\n'));
    const second = await runWorker(quoted, {}, 30_000);
    expect(second.result).toMatchObject({ code: 2 });
    expect(second.output).toMatch(/is not valid YAML/);
    expectNowhere(second.output, [PASSWORD]);
  }, 90_000);

  it('a config validation error on transport.kafka.sasl names the field, never the value', async () => {
    const file = configFile({
      transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'], sasl: { mechanism: 'gssapi', username: 'fleet', password: { value: PASSWORD } } } },
      models: ['mlp-classifier'],
    });
    const { result, output } = await runWorker(file, {}, 30_000);
    expect(result).toMatchObject({ code: 2 });
    expect(output).toMatch(/transport\.kafka\.sasl\.mechanism: .*transport\.kafka\.sasl\.password: Invalid input: expected string, received object/);
    expectNowhere(output, [PASSWORD]);
  }, 60_000);

  it('a wrong SASL password (debug logs on) fails the worker naming transport.kafka.sasl, and is printed nowhere', async () => {
    const sasl = getServices().kafkaSasl;
    const file = configFile({
      transport: { kind: 'kafka', kafka: { brokers: sasl.brokers, groupId: uniqueName('secrets-group'), sasl: { mechanism: 'plain', username: sasl.username, password: PASSWORD } } },
      devices: { count: 1, backend: 'sim' },
      models: ['mlp-classifier'],
      worker: { metricsPort: 0 },
    });
    const { result, output } = await runWorker(file, { NPU_FLEET_LOG_LEVEL: 'debug' }, 90_000);
    expect(result, output).not.toBe('running');
    expect(output).toMatch(/refused the SASL login of transport\.kafka\.sasl/);
    expectNowhere(output, [PASSWORD]);
  }, 120_000);

  it('npu-fleet start (supervised) with a wrong SASL password: its worker fails and is restarted, and neither prints the password', async () => {
    const sasl = getServices().kafkaSasl;
    const file = configFile({
      transport: { kind: 'kafka', kafka: { brokers: sasl.brokers, groupId: uniqueName('secrets-start'), sasl: { mechanism: 'plain', username: sasl.username, password: PASSWORD } } },
      devices: { count: 1, backend: 'sim' },
      models: ['mlp-classifier'],
      worker: { metricsPort: 0 },
    });
    const start = spawnCli(['start', '--config', file], { NPU_FLEET_DEVICE: 'sim', NPU_FLEET_LOG_LEVEL: 'debug' });
    try {
      const deadline = Date.now() + 90_000;
      while (!/worker exited/.test(start.output()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      expect(start.output()).toMatch(/refused the SASL login of transport\.kafka\.sasl/);
      expect(start.output()).toMatch(/worker exited/);
      expectNowhere(start.output(), [PASSWORD]);
    } finally {
      start.child.kill('SIGTERM');
      const stopped = await Promise.race([start.exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 30_000))]);
      if (stopped === 'slow') start.child.kill('SIGKILL');
    }
    expectNowhere(start.output(), [PASSWORD]);
  }, 150_000);

  it('npu-fleet publish and dlq list with a wrong SASL password fail naming transport.kafka.sasl, and print it nowhere', async () => {
    const sasl = getServices().kafkaSasl;
    const file = configFile({
      transport: { kind: 'kafka', kafka: { brokers: sasl.brokers, groupId: uniqueName('secrets-pub'), sasl: { mechanism: 'plain', username: sasl.username, password: PASSWORD } } },
      models: ['mlp-classifier'],
    });
    for (const args of [
      ['publish', '--config', file, '--model', 'mlp-classifier', '--count', '1'],
      ['dlq', 'list', '--config', file, '--model', 'mlp-classifier'],
    ]) {
      const r = spawnSync(process.execPath, ['bin/npu-fleet.js', ...args], { encoding: 'utf8', timeout: 90_000, env: { ...process.env, NPU_FLEET_LOG_LEVEL: 'debug' } });
      expect(r.status, r.stdout + r.stderr).not.toBe(0);
      expect(r.stdout + r.stderr).toMatch(/SASL/);
      expectNowhere(r.stdout + r.stderr, [PASSWORD]);
    }
  }, 200_000);

  it('a Redis password in transport.bullmq.redisUrl (Redis not there, or the URL unparsable): worker, publish and dlq list fail naming where, debug logs on, and print it nowhere', async () => {
    const closedPort = await freePort();
    for (const redisUrl of [`redis://fleet:${PASSWORD}@127.0.0.1:${closedPort}/0`, `rediss://fleet:${PASSWORD}@127.0.0.1:notaport/0`]) {
      const file = configFile({
        transport: { kind: 'bullmq', bullmq: { redisUrl, prefix: uniqueName('secrets-bull'), connectTimeoutMs: 1_500 } },
        devices: { count: 1, backend: 'sim' },
        models: ['mlp-classifier'],
        worker: { metricsPort: 0 },
      });
      const where = redisUrl.includes('notaport') ? /transport\.bullmq\.redisUrl \(unparsable URL\) is not a usable Redis URL/ : new RegExp(`Redis at 127\\.0\\.0\\.1:${closedPort} did not answer within 1500 ms`);
      const worker = await runWorker(file, { NPU_FLEET_LOG_LEVEL: 'debug' }, 60_000);
      expect(worker.result, worker.output).not.toBe('running');
      expect(worker.output).toMatch(where);
      expectNowhere(worker.output, [PASSWORD]);
      for (const args of [
        ['publish', '--config', file, '--model', 'mlp-classifier', '--count', '1'],
        ['dlq', 'list', '--config', file, '--model', 'mlp-classifier'],
      ]) {
        const r = spawnSync(process.execPath, ['bin/npu-fleet.js', ...args], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, NPU_FLEET_LOG_LEVEL: 'debug' } });
        expect(r.status, r.stdout + r.stderr).not.toBe(0);
        expect(r.stdout + r.stderr).toMatch(/Redis/);
        expectNowhere(r.stdout + r.stderr, [PASSWORD]);
      }
    }
  }, 240_000);

  it('TLS key material (transport.kafka.ssl.keyFile) the brokers cannot use is printed nowhere, debug logs on', async () => {
    const tls = getServices().kafkaTls;
    const dir = tempDir('npu-fleet-secrets-key-');
    const keyFile = join(dir, 'client.key');
    const certFile = join(dir, 'client.crt');
    writeFileSync(keyFile, `-----BEGIN PRIVATE KEY-----\n${Buffer.from(`${PASSWORD}-KEY`).toString('base64')}\n-----END PRIVATE KEY-----\n${PASSWORD}-KEY\n`);
    writeFileSync(certFile, `-----BEGIN CERTIFICATE-----\n${Buffer.from(`${PASSWORD}-CERT`).toString('base64')}\n-----END CERTIFICATE-----\n`);
    const file = configFile({
      transport: { kind: 'kafka', kafka: { brokers: tls.brokers, groupId: uniqueName('secrets-tls'), ssl: { caFile: tls.caFile, certFile, keyFile } } },
      devices: { count: 1, backend: 'sim' },
      models: ['mlp-classifier'],
      worker: { metricsPort: 0 },
    });
    const { result, output } = await runWorker(file, { NPU_FLEET_LOG_LEVEL: 'debug' }, 90_000);
    expect(result, output).not.toBe('running');
    expectNowhere(output, [`${PASSWORD}-KEY`, Buffer.from(`${PASSWORD}-KEY`).toString('base64')]);
  }, 120_000);
});

describe('request payloads in what the CLI prints', () => {
  it('invalid, rejected and served requests: their bytes and meta reach no worker log line (info) and no dlq list', async () => {
    const tag = uniqueName('secrets').replace(/[^A-Za-z0-9-]/g, '');
    const kafka = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
    const file = configFile({ transport: { kind: 'kafka', kafka }, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 } });
    const worker = spawnCli(['worker', '--device', '0', '--config', file], { NPU_FLEET_DEVICE: 'sim', NODE_OPTIONS: '--max-semi-space-size=16', NPU_FLEET_LOG_LEVEL: 'info' });
    const producer = new Kafka({ clientId: 'secrets', brokers: getServices().kafkaBrokers, logLevel: logLevel.NOTHING }).producer();
    try {
      const readyBy = Date.now() + 60_000;
      while (!worker.output().includes('worker ready') && Date.now() < readyBy) await new Promise((r) => setTimeout(r, 100));
      expect(worker.output()).toContain('worker ready');
      await producer.connect();
      const DATA = 'PAYLOADBYTES'; // 12 bytes: a float32 [1,3] tensor
      const bytes = new Uint8Array(Buffer.from(DATA));
      const bad = (id: string, extra: Parameters<typeof makeRequest>[3]) => makeRequest('mlp-classifier', id, 0, { meta: { note: 'SENTINEL-META' }, inputs: [{ name: 'x', dtype: 'float32', shape: [1, 3], data: bytes }], ...extra });
      const messages = [
        // Not JSON at all, starting with the payload: V8's JSON.parse error quotes the text's start.
        { value: Buffer.from(`${DATA}-RAW {"meta":"SENTINEL-META"}`) },
        // JSON broken inside meta: V8 quotes the text around the bad token.
        { value: Buffer.from(`{"id":"broken-meta","model":"mlp-classifier","meta":{"note":SENTINEL-META}}`) },
        // Does not fit the model's input (invalid), both encodings.
        { value: encodeRequest(bad('wrong-shape-json', {}), 'json') },
        { value: encodeRequest(bad('wrong-shape-bin', {}), 'binary') },
        // A model the worker does not serve (rejected).
        { value: encodeRequest(bad('unknown-model', { model: 'no-such-model' }), 'json') },
        // A request the model serves, with meta.
        { value: encodeRequest(makeRequest('mlp-classifier', 'served', 0, { meta: { note: 'SENTINEL-META' }, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: new Uint8Array(256).fill(0x41) }] }), 'json') },
      ];
      await producer.send({ topic: `${tag}.mlp-classifier.requests.p0`, messages });

      const dl = new KafkaDeadLetters(kafka);
      let scanned = 0;
      try {
        const deadline = Date.now() + 60_000;
        while (scanned < 5 && Date.now() < deadline) {
          scanned = (await dl.list({ model: 'mlp-classifier' })).scanned;
          if (scanned < 5) await new Promise((r) => setTimeout(r, 500));
        }
      } finally {
        await dl.close();
      }
      // At least once: a rebalance right after the worker joined may dead-letter a request twice.
      expect(scanned, worker.output()).toBeGreaterThanOrEqual(5);
      await new Promise((r) => setTimeout(r, 1_000));
      // Short pieces: V8's JSON.parse errors quote about ten characters around the bad token.
      const payload = [DATA.slice(0, 6), Buffer.from(DATA).toString('base64').slice(0, 8), 'SENTINEL', 'AAAAAAAAAAAAAAAA', 'QUFBQUFBQUFB'];
      expectNowhere(worker.output(), payload);

      for (const args of [[], ['--json']]) {
        const r = spawnSync(process.execPath, ['bin/npu-fleet.js', 'dlq', 'list', '--config', file, '--model', 'mlp-classifier', ...args], { encoding: 'utf8', timeout: 60_000 });
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout).toMatch(args.length === 0 ? /\d+ record\(s\)/ : /"scanned":\d+/);
        // The two that are not JSON are listed, by what was wrong with them (not by their text).
        expect(r.stdout).toContain("valid JSON: Unexpected token 'P'");
        expect(r.stdout).toContain("valid JSON: Unexpected token 'S'");
        expectNowhere(r.stdout + r.stderr, payload);
      }
    } finally {
      await producer.disconnect().catch(() => undefined);
      worker.child.kill('SIGTERM');
      await Promise.race([worker.exited, new Promise((r) => setTimeout(r, 20_000))]);
      worker.child.kill('SIGKILL');
    }
  }, 240_000);

  it('publish --file: a data-set line that is not JSON is reported without quoting the line', async () => {
    const tag = uniqueName('secrets-pub').replace(/[^A-Za-z0-9-]/g, '');
    const kafka = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
    const file = configFile({ transport: { kind: 'kafka', kafka }, models: ['mlp-classifier'] });
    const data = join(tempDir('npu-fleet-secrets-data-'), 'data.jsonl');
    writeFileSync(data, ['{"id":"l1","model":"mlp-classifier","meta":{"patient":SENTINEL-META}}', 'PAYLOADBYTES-RAW', ''].join('\n'));
    const r = spawnSync(process.execPath, ['bin/npu-fleet.js', 'publish', '--config', file, '--file', data], { encoding: 'utf8', timeout: 60_000 });
    expect(r.stdout + r.stderr).toMatch(/line 1 is not JSON/);
    expect(r.stdout + r.stderr).toMatch(/line 2 is not JSON/);
    expectNowhere(r.stdout + r.stderr, ['SENTINEL', 'PAYLOA']);
  }, 90_000);

  it('dlq list: a record dead-lettered before the codec dropped V8\'s quote is listed without the quoted text', async () => {
    const model = uniqueName('oldquote').replace(/[^A-Za-z0-9-]/g, '');
    const tag = uniqueName('secrets-old').replace(/[^A-Za-z0-9-]/g, '');
    const kafka = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
    const file = configFile({ transport: { kind: 'kafka', kafka }, models: ['mlp-classifier'] });
    const t = new KafkaTransport(kafka, { partitions: 1, retries: 1 });
    const producer = new KafkaProducer(kafka, { partitions: 1 });
    try {
      const inbox = new Inbox();
      await startWith(t, model, inbox);
      await producer.publish([makeRequest(model, 'old-1', 0)]);
      const [d] = await inbox.waitFor(1, 30_000);
      const o = outcomeFor(d!);
      // What the worker wrote until 75d316a for a request whose JSON broke inside meta.
      const message = 'message is neither an npu-fleet frame nor valid JSON: Unexpected token \'S\', ..."":{"note":SENTINEL-M"... is not valid JSON';
      await t.settle([{ ...o, result: { ...o.result, status: 'invalid', outputs: undefined, error: { code: 'INVALID_MESSAGE', message } }, dlq: { reason: 'INVALID_MESSAGE', message } }]);
      const dl = new KafkaDeadLetters(kafka);
      try {
        const deadline = Date.now() + 30_000;
        while ((await dl.list({ model })).scanned < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 300));
      } finally {
        await dl.close();
      }
      for (const args of [[], ['--json']]) {
        const r = spawnSync(process.execPath, ['bin/npu-fleet.js', 'dlq', 'list', '--config', file, '--model', model, ...args], { encoding: 'utf8', timeout: 60_000 });
        expect(r.status, r.stderr).toBe(0);
        expect(r.stdout).toContain("valid JSON: Unexpected token 'S'");
        expectNowhere(r.stdout + r.stderr, ['SENTINEL']);
      }
    } finally {
      await Promise.allSettled([t.close(), producer.close()]);
    }
  }, 120_000);
});
