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
    const proc: ServiceProcess = startServiceProcess(
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
    const url = `redis://127.0.0.1:${port}`;
    try {
      let version = 'unknown';
      await waitUntil(`redis-server on port ${port}`, proc, async () => {
        version = (await redisInfo(url, 500)).version;
        return true;
      }, READY_TIMEOUT_MS);
      return { url, version, startupMs: Date.now() - startedAt, stop: () => proc.stop(2_000) };
    } catch (error) {
      lastError = error;
      await proc.stop(500);
    }
  }
  throw lastError instanceof Error ? lastError : new Error(String(lastError));
}
