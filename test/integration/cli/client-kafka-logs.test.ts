import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/** A Kafka config whose only broker address nobody listens on. */
function deadBrokerConfig(): string {
  const configFile = join(tempDir('npu-fleet-kafka-logs-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } }, models: ['mlp-classifier'] }));
  return configFile;
}

/** The log lines of a run's output (pino's JSON, with its numeric level: 40 warn, 50 error), not its result lines. */
function logLines(output: string): Array<{ level: number; msg: string }> {
  return output.split('\n').flatMap((line) => {
    if (!line.startsWith('{')) return [];
    try {
      const parsed = JSON.parse(line) as { level?: unknown; msg?: unknown };
      return typeof parsed.level === 'number' && typeof parsed.msg === 'string' ? [{ level: parsed.level, msg: parsed.msg }] : [];
    } catch {
      return [];
    }
  });
}

async function run(args: readonly string[]): Promise<{ code: number | null; output: string }> {
  const { child, exited, output } = spawnCli(args);
  const end = await Promise.race([exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 50_000))]);
  if (end === 'no exit') child.kill('SIGKILL');
  return { code: end === 'no exit' ? null : end.code, output: output() };
}

/**
 * A client command against a broker that is not there: the user gets the line saying no broker
 * answered, not kafkajs's ERROR and WARN line per connection attempt (34 JSON lines over ~16 s
 * before it, from publish and from load).
 */
describe('client commands on Kafka, no broker answering', () => {
  it('publish --await: the line naming the broker list, and at most a bounded, deduplicated warning of the retries', async () => {
    const { code, output } = await run(['publish', '--config', deadBrokerConfig(), '--model', 'mlp-classifier', '--count', '3', '--await']);
    expect(code, output).toBe(1);
    expect(output).toMatch(/no broker of transport\.kafka\.brokers \(127\.0\.0\.1:1\) answered/);
    const lines = logLines(output);
    expect(lines.filter((l) => l.level >= 50), output).toEqual([]);
    expect(lines.length, output).toBeLessThanOrEqual(2);
    expect(new Set(lines.map((l) => l.msg.replace(/ \(repeated .*\)$/, ''))).size, output).toBe(lines.length);
  });

  it('dlq list: the line naming the broker list, no kafkajs error lines', async () => {
    const { code, output } = await run(['dlq', 'list', '--config', deadBrokerConfig(), '--model', 'mlp-classifier']);
    expect(code, output).toBe(1);
    expect(output).toMatch(/no broker of transport\.kafka\.brokers \(127\.0\.0\.1:1\) answered/);
    expect(logLines(output), output).toEqual([]);
  });
});
