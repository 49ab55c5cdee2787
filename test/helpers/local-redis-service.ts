// A throwaway redis-server from PATH: loopback only, free port, no persistence, in a temp dir.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, startServiceProcess, waitUntil } from './service-process.ts';
import type { ServiceProcess } from './service-process.ts';

export interface LocalRedis {
  readonly url: string;
  readonly version: string;
  readonly startupMs: number;
  /**
   * SHUTDOWN SAVE, `downMs` with no Redis at all, then redis-server again on the same port, loading
   * what was saved: a Redis restart as a managed service does one (drills).
   */
  restart(downMs: number): Promise<void>;
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 15_000;

export function findRedisServer(): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Reads server info through a fresh connection; throws if the server does not answer. */
export async function redisInfo(url: string, timeoutMs = 2_000): Promise<{ version: string }> {
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const info = await client.info('server');
    const version = /redis_version:([^\r\n]+)/.exec(info)?.[1] ?? 'unknown';
    return { version };
  } finally {
    client.disconnect();
  }
}

export async function startLocalRedis(workDir: string): Promise<LocalRedis> {
  const binary = findRedisServer();
  if (binary === undefined) {
    throw new Error('redis-server is not on PATH: install it (apt-get install redis-server) or set REDIS_URL');
  }
  const startedAt = Date.now();
  let lastError: unknown;
  for (let attempt = 1; attempt <= 3; attempt++) {
    const port = await freePort();
    const launch = (): ServiceProcess => startServiceProcess(
      'redis-server',
      binary,
      [
        '--port', String(port),
        '--bind', '127.0.0.1',
        '--dir', workDir,
        '--save', '',
        '--appendonly', 'no',
        '--daemonize', 'no',
        '--logfile', '',
        // BullMQ requires this policy; anything else makes it warn on every connection.
        '--maxmemory-policy', 'noeviction',
      ],
      { cwd: workDir, logPath: join(workDir, `redis-${port}.log`) },
    );
    let proc = launch();
    const url = `redis://127.0.0.1:${port}`;
    try {
      let version = 'unknown';
      await waitUntil(`redis-server on port ${port}`, proc, async () => {
        version = (await redisInfo(url, 500)).version;
        return true;
      }, READY_TIMEOUT_MS);
      const restart = async (downMs: number): Promise<void> => {
        const admin = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
        // The connection drops as the server exits: that is the expected answer.
        await admin.call('SHUTDOWN', 'SAVE').catch(() => undefined);
        admin.disconnect();
        await Promise.race([proc.exited, new Promise((r) => setTimeout(r, 10_000))]);
        await proc.stop(1_000);
        await new Promise((r) => setTimeout(r, downMs));
        proc = launch();
        await waitUntil(`redis-server on port ${port} (restarted)`, proc, async () => (await redisInfo(url, 500), true), READY_TIMEOUT_MS);
      };
      return { url, version, startupMs: Date.now() - startedAt, restart, stop: () => proc.stop(2_000) };
    } catch (error) {
      lastError = error;
      await proc.stop(500);
    }
  }
  throw lastError instanceof Error ? lastError : new Error(String(lastError));
}
