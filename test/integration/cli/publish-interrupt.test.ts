import { spawnCli } from '../../helpers/spawn-cli.ts';
import { writeFileSync } from 'node:fs';
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
});
