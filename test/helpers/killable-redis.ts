// A redis-server of one test's own, to SIGKILL mid-run (killing the shared one would break every
// other test file): a broker that vanishes without closing anything, as on a crashed host.
import { join } from 'node:path';
import { findRedisServer, redisInfo } from './local-redis-service.ts';
import { freePort, startServiceProcess, waitUntil } from './service-process.ts';

export interface KillableRedis {
  readonly url: string;
  kill(): void;
  /** SIGSTOP: its connections stay open and nothing answers (a hung host), so a client sees no close. */
  freeze(): void;
  /** SIGCONT after freeze(): it answers again on the connections it kept. */
  thaw(): void;
  stop(): Promise<void>;
}

export async function startKillableRedis(dir: string): Promise<KillableRedis> {
  const binary = findRedisServer();
  if (binary === undefined) throw new Error('redis-server is not on PATH: install it (apt-get install redis-server)');
  const port = await freePort();
  const proc = startServiceProcess('redis-server', binary, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction'], {
    cwd: dir,
    logPath: join(dir, `redis-${port}.log`),
  });
  const url = `redis://127.0.0.1:${port}`;
  try {
    await waitUntil(`redis-server on ${port}`, proc, async () => (await redisInfo(url, 500), true), 15_000);
  } catch (error) {
    await proc.stop(500);
    throw error;
  }
  const pid = proc.child.pid;
  return {
    url,
    kill: () => {
      if (pid !== undefined) process.kill(-pid, 'SIGKILL');
    },
    freeze: () => {
      if (pid !== undefined) process.kill(-pid, 'SIGSTOP');
    },
    thaw: () => {
      if (pid !== undefined) process.kill(-pid, 'SIGCONT');
    },
    stop: () => proc.stop(500),
  };
}
