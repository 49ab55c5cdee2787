// What the real CLI prints (stdout and stderr of `npu-fleet worker` and `npu-fleet dlq list`) must
// never hold a Kafka credential, TLS key material or a request's payload (tensor bytes, meta): logs
// are shipped and kept far more widely than the brokers' own data. Each case plants a sentinel and
// greps the whole output for it.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

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
