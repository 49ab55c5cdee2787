// `npu-fleet publish --model M --count N` without --await, for a large N: the synthetic requests
// used to be built all at once (every tensor in memory: gigabytes for an image model at the
// allowed --count 1000000) and sent as one publish; nothing reached the queue until all were
// built, if the process survived that. They are now made and sent a chunk at a time.
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/** Resident memory of a process, MB (Linux /proc). */
function rssMb(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
  return Number(/(\d+)/.exec(line ?? '')?.[1] ?? 0) / 1024;
}

const RSS_BOUND_MB = 600;

describe('npu-fleet publish --count N (fire and forget)', () => {
  it('sends as it goes with bounded memory, and SIGTERM stops it saying how many went out (exit 130)', { timeout: 90_000 }, async () => {
    const dir = tempDir('npu-fleet-publish-count-');
    const prefix = uniqueName('pubcount');
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } }, models: ['small-cnn'] }));
    const { child, exited, output } = spawnCli(['publish', '--config', configFile, '--model', 'small-cnn', '--count', '1000000']);
    const redis = new Redis(getServices().redisUrl);
    const queued = async (): Promise<number> => (await redis.zcard(`${prefix}:small-cnn.requests:prioritized`)) + (await redis.llen(`${prefix}:small-cnn.requests:wait`));
    let peakMb = 0;
    try {
      // Requests reach the queue while the run goes on, and memory stays bounded meanwhile (killed
      // at the bound rather than left to take the machine's memory).
      let firstAt: number | undefined;
      for (const deadline = Date.now() + 30_000; Date.now() < deadline; ) {
        peakMb = Math.max(peakMb, rssMb(child.pid as number));
        if (peakMb > RSS_BOUND_MB) break;
        if (firstAt === undefined && (await queued()) > 0) firstAt = Date.now();
        if (firstAt !== undefined && Date.now() - firstAt > 3_000) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      child.kill('SIGTERM');
      const code = await Promise.race([exited.then((e) => e.code), new Promise<string>((r) => setTimeout(() => r('no exit within 20 s'), 20_000))]);
      if (code !== 130) child.kill('SIGKILL');
      expect(peakMb, output()).toBeLessThan(RSS_BOUND_MB);
      expect(firstAt, `no request reached the queue within 30 s\n${output()}`).toBeDefined();
      expect(code, output()).toBe(130);
      const sent = Number(/interrupted by SIGTERM after publishing (\d+) of 1000000 request\(s\)/.exec(output())?.[1]);
      expect(sent, output()).toBeGreaterThan(0);
      expect(await queued()).toBe(sent);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      const keys = await redis.keys(`${prefix}:*`);
      for (let i = 0; i < keys.length; i += 1000) await redis.unlink(...keys.slice(i, i + 1000));
      redis.disconnect();
    }
  });
});
