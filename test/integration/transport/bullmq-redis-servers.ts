// Throwaway redis-server processes set up the ways production Redis is (password, ACL user, TLS,
// Sentinel, Cluster), each on its own free port: the shared test Redis is none of these.
import { writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { findRedisServer } from '../../helpers/local-redis-service.ts';
import { freePort, startServiceProcess, waitUntil, type ServiceProcess } from '../../helpers/service-process.ts';

const running: ServiceProcess[] = [];
afterAll(async () => {
  await Promise.allSettled(running.splice(0).map((p) => p.stop(2_000)));
});

export interface RedisProcess {
  readonly port: number;
  readonly proc: ServiceProcess;
}

/** A redis-server on `port` (default: a free one; with --port in `args`, the port to wait on, e.g. the TLS one) in `dir`; ready once that port accepts. */
export async function startRedisWith(dir: string, args: readonly string[], port?: number): Promise<RedisProcess> {
  const binary = findRedisServer();
  if (binary === undefined) throw new Error('redis-server is not on PATH: install it (apt-get install redis-server)');
  const p = port ?? (await freePort());
  const proc = startServiceProcess(
    'redis-server',
    binary,
    [
      ...args,
      ...(args.includes('--port') ? [] : ['--port', String(p)]),
      '--bind', '127.0.0.1',
      '--dir', dir,
      '--save', '',
      '--appendonly', 'no',
      '--daemonize', 'no',
      '--logfile', '',
      '--maxmemory-policy', 'noeviction',
    ],
    { cwd: dir, logPath: join(dir, `redis-${p}.log`) },
  );
  running.push(proc);
  await waitUntil(`redis-server on port ${p}`, proc, () => accepts(p), 15_000);
  return { port: p, proc };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });
}

/** A sentinel on a free port watching `masterPort` as `name` (quorum 1 unless given): the smallest Sentinel setup. */
export async function startSentinel(dir: string, name: string, masterPort: number, extraConf = '', quorum = 1): Promise<RedisProcess> {
  const binary = findRedisServer();
  if (binary === undefined) throw new Error('redis-server is not on PATH: install it (apt-get install redis-server)');
  const port = await freePort();
  // A sentinel rewrites its config file: it must be a file of its own, writable.
  const conf = join(dir, `sentinel-${port}.conf`);
  writeFileSync(conf, `port ${port}\nbind 127.0.0.1\ndir ${dir}\nsentinel monitor ${name} 127.0.0.1 ${masterPort} ${quorum}\n${extraConf}`);
  const proc = startServiceProcess('redis-sentinel', binary, [conf, '--sentinel'], { cwd: dir, logPath: join(dir, `sentinel-${port}.log`) });
  running.push(proc);
  await waitUntil(`redis sentinel on port ${port}`, proc, () => accepts(port), 15_000);
  return { port, proc };
}

/** Sends `signal` to a server's process group: SIGKILL (a crashed host), SIGSTOP (frozen: its port accepts, nothing answers), SIGCONT. */
export function signalServer(server: RedisProcess, signal: 'SIGKILL' | 'SIGSTOP' | 'SIGCONT'): void {
  const pid = server.proc.child.pid;
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone.
  }
}
