// `npu-fleet load` / `frames` whose producer cannot open its reply inbox (the broker does not
// answer): the run does not start, stderr says what it was waiting for and names the transport,
// the exit is 1 and nothing was sent. The wait is bounded: by the transport's own connect bound
// (kafkajs's retries, transport.bullmq.connectTimeoutMs) or --timeout-ms, whichever is first.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { main } from '../../../src/cli/main.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { freePort } from '../../helpers/service-process.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { until } from '../../helpers/until.ts';

const { stdout, stderr } = captureCliOutput();

function configWith(transport: unknown): string {
  const file = join(tempDir('npu-fleet-notready-'), 'fleet.yaml');
  writeFileSync(file, stringify({ transport, modelRepository: 'examples/models', log: { level: 'error' } }));
  return file;
}

describe('load and frames when the reply inbox cannot be opened', () => {
  it('Kafka brokers not answering: exit 1 naming transport.kafka.brokers, a progress line first, nothing sent', { timeout: 60_000 }, async () => {
    const configFile = configWith({ kind: 'kafka', kafka: { brokers: [`127.0.0.1:${await freePort()}`] } });
    const startedAt = Date.now();
    expect(await main(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '50', '--seconds', '1'])).toBe(1);
    const err = stderr.join('');
    // Said while waiting, before the error (kafkajs's own connection errors are logged around it).
    expect(err).toMatch(/^load: opening the reply inbox on kafka \(connecting, creating its topic, joining its consumer group\) before the run starts\.\.\.$[\s\S]*^npu-fleet: load: /m);
    expect(err).toMatch(
      /npu-fleet: load: the kafka producer could not open its reply inbox, so no request was sent: connecting the kafka producer failed: no broker of transport\.kafka\.brokers \(127\.0\.0\.1:\d+\) answered/,
    );
    expect(err).not.toMatch(/the reply inbox is open/);
    expect(stdout.join(''), 'only the title: no progress line, no summary').toMatch(/^load: 50 req\/s of mlp-classifier for 1 s \(kafka\)\n$/);
    expect(Date.now() - startedAt).toBeLessThan(20_000);
  });

  it('frames on Kafka: --timeout-ms bounds the wait when it is shorter than the connect retries', { timeout: 60_000 }, async () => {
    const configFile = configWith({ kind: 'kafka', kafka: { brokers: [`127.0.0.1:${await freePort()}`] } });
    const startedAt = Date.now();
    expect(await main(['frames', '--config', configFile, '--model', 'mlp-classifier', '--seconds', '1', '--timeout-ms', '1000'])).toBe(1);
    const failedAfterMs = Date.now() - startedAt;
    const err = stderr.join('');
    expect(err).toMatch(
      /npu-fleet: frames: the kafka producer could not open its reply inbox, so no request was sent: it did not finish within 1000 ms \(--timeout-ms\); --timeout-ms also bounds opening the reply inbox \(.*\): raise it if the brokers are up, else check transport\.kafka\.brokers/,
    );
    // 1 s, then the producer's close (bounded by the CLI at 5 s).
    expect(failedAfterMs).toBeLessThan(8_000);
    expect(stdout.join('')).not.toMatch(/done: |sent \d+\/s/);
  });

  it('BullMQ with Redis not answering: exit 1 within connectTimeoutMs naming transport.bullmq.redisUrl', { timeout: 60_000 }, async () => {
    const configFile = configWith({ kind: 'bullmq', bullmq: { redisUrl: `redis://127.0.0.1:${await freePort()}`, connectTimeoutMs: 1_000 } });
    const startedAt = Date.now();
    expect(await main(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '50', '--seconds', '1'])).toBe(1);
    const err = stderr.join('');
    expect(err).toMatch(/^load: opening the reply inbox on bullmq \(connecting to Redis, starting its reply worker\) before the run starts\.\.\.$[\s\S]*^npu-fleet: load: /m);
    expect(err).toMatch(/npu-fleet: load: the bullmq producer could not open its reply inbox, so no request was sent: bullmq producer: Redis at 127\.0\.0\.1:\d+ did not answer within 1000 ms .*transport\.bullmq\.redisUrl/);
    expect(stdout.join('')).not.toMatch(/done: |sent \d+\/s/);
    expect(Date.now() - startedAt).toBeLessThan(8_000);
  });

  it('Ctrl-C while waiting: stops without sending, a summary of nothing sent, exit 0', { timeout: 60_000 }, async () => {
    const configFile = configWith({ kind: 'kafka', kafka: { brokers: [`127.0.0.1:${await freePort()}`] } });
    const run = spawnCli(['load', '--config', configFile, '--model', 'mlp-classifier', '--rate', '50']);
    try {
      await until(() => /opening the reply inbox on kafka/.test(run.output()), 30_000, 'the progress line');
      run.child.kill('SIGINT');
      const exit = await Promise.race([run.exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 10_000))]);
      const out = run.output();
      expect(exit, out.slice(-2000)).toEqual({ code: 0, signal: null });
      expect(out).toMatch(/^stopped by SIGINT: sent 0 \| /m);
      expect(out).not.toMatch(/the reply inbox is open|could not open its reply inbox/);
    } finally {
      run.child.kill('SIGKILL');
    }
  });
});
