import { spawnCli } from '../../helpers/spawn-cli.ts';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/** `npu-fleet publish --await` interrupted while no worker answers: it cleans up and says so. */
describe('npu-fleet publish --await, interrupted', () => {
  it('exits 130 on SIGINT, naming how far it got, and removes its private inbox queue', async () => {
    const dir = tempDir('npu-fleet-publish-int-');
    const prefix = uniqueName('pubint');
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } }, models: ['mlp-classifier'] }));
    const { child, exited, output } = spawnCli(['publish', '--config', configFile, '--model', 'mlp-classifier', '--count', '2', '--await', '--timeout-ms', '60000']);

    const redis = new Redis(getServices().redisUrl);
    try {
      const inboxKeys = async (): Promise<string[]> => (await redis.keys(`${prefix}:*inbox*`)).sort();
      const requestKeys = async (): Promise<string[]> => redis.keys(`${prefix}:mlp-classifier*`);
      // Published and waiting: the requests are in their queue, the inbox worker is listening.
      const deadline = Date.now() + 30_000;
      while ((await requestKeys()).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(await requestKeys(), output()).not.toEqual([]);
      await new Promise((r) => setTimeout(r, 500));
      child.kill('SIGINT');
      const code = await Promise.race([exited.then((e) => e.code), new Promise<string>((r) => setTimeout(() => r('no exit within 20 s'), 20_000))]);
      if (code !== 130) child.kill('SIGKILL');
      expect(code, output()).toBe(130);
      expect(output()).toMatch(/interrupted by SIGINT after 0 of 2 result\(s\); the others were published and may still be served/);
      expect(await inboxKeys()).toEqual([]);
    } finally {
      redis.disconnect();
    }
  });

  // Between taking RESULTS.lock and the run's own signal handlers come the phases before the first
  // publish (reading RESULTS to resume, counting the lines, the ids' first pass: minutes for tens
  // of millions of lines). A SIGTERM there killed the process by default: exit 143, nothing said,
  // and RESULTS.lock left behind.
  it('a SIGTERM while the data set is still being read exits 130, says nothing was sent, and leaves no RESULTS.lock', async () => {
    const dir = tempDir('npu-fleet-publish-int-');
    const configFile = join(dir, 'fleet.yaml');
    // Nothing connects before the first publish: an address nobody listens on shows that.
    writeFileSync(configFile, stringify({ transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } }, models: ['mlp-classifier'] }));
    const data = join(dir, 'data.jsonl');
    writeFileSync(data, '{"id":"x"}\n'.repeat(3_000_000));
    const results = join(dir, 'results.jsonl');
    const { child, exited, output } = spawnCli(['publish', '--config', configFile, '--file', data, '--await', '--out', results]);
    const deadline = Date.now() + 30_000;
    while (!existsSync(`${results}.lock`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    expect(existsSync(`${results}.lock`), output()).toBe(true);
    child.kill('SIGTERM');
    const end = await Promise.race([exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 20_000))]);
    if (end === 'no exit') child.kill('SIGKILL');
    expect(end, output()).toEqual({ code: 130, signal: null });
    expect(output()).toMatch(/npu-fleet: interrupted by SIGTERM before publishing started: nothing was sent/);
    expect(existsSync(`${results}.lock`)).toBe(false);
  });
});
