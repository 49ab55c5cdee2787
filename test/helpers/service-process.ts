// Child processes for the local test services (redis-server, the Kafka broker): free ports, a log
// file, and teardown that leaves no orphans even when the test runner itself is killed.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';

export interface ServiceProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly logPath: string;
  /** Resolves once the process is gone. */
  readonly exited: Promise<void>;
  stop(graceMs?: number): Promise<void>;
}

const SETPRIV = '/usr/bin/setpriv';
const liveGroups = new Set<number>();
let exitHookInstalled = false;

// 'exit' handlers cannot wait, so this is the last-resort SIGKILL when the runner exits without teardown.
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const pgid of liveGroups) killGroup(pgid, 'SIGKILL');
  });
}

function killGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // already gone
  }
}

/**
 * Starts `command` in its own process group with stdout+stderr appended to logPath.
 * With setpriv available the child also gets a parent-death signal, so a SIGKILLed test runner
 * does not leave a broker behind.
 */
export function startServiceProcess(
  name: string,
  command: string,
  args: readonly string[],
  opts: { cwd: string; logPath: string; env?: NodeJS.ProcessEnv },
): ServiceProcess {
  installExitHook();
  const logFd = openSync(opts.logPath, 'a');
  const usePdeathsig = existsSync(SETPRIV);
  const [file, argv] = usePdeathsig
    ? [SETPRIV, ['--pdeathsig', 'SIGKILL', '--', command, ...args]]
    : [command, [...args]];
  const child = spawn(file, argv, {
    cwd: opts.cwd,
    env: opts.env ?? process.env,
    stdio: ['ignore', logFd, logFd],
    detached: true,
  });
  closeSync(logFd);
  const pgid = child.pid;
  if (pgid !== undefined) liveGroups.add(pgid);
  const exited = new Promise<void>((resolve) => {
    const done = (): void => {
      if (pgid !== undefined) liveGroups.delete(pgid);
      resolve();
    };
    child.once('exit', done);
    child.once('error', done);
  });
  // The runner must not wait on the service to exit.
  child.unref();

  return {
    name,
    child,
    logPath: opts.logPath,
    exited,
    async stop(graceMs = 5_000): Promise<void> {
      if (pgid === undefined || child.exitCode !== null || child.signalCode !== null) return;
      killGroup(pgid, 'SIGTERM');
      // A referenced timer: the child is unref'd, so without it the runner could exit mid-teardown.
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        exited.then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), graceMs);
        }),
      ]);
      clearTimeout(timer);
      // Forks of the main process (none expected) would share the group: always sweep it.
      killGroup(pgid, 'SIGKILL');
      if (timedOut) await exited;
    },
  };
}

/** A port that was free a moment ago on 127.0.0.1 (callers retry on a bind race). */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  if (port === undefined) throw new Error('no port assigned');
  return port;
}

/**
 * `count` distinct free ports. Each is held open until all are found: ports asked for one after
 * another, each closed before the next, can come back equal (a broker then got PLAINTEXT and
 * CONTROLLER on one port and failed to start).
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    const ports: number[] = [];
    for (let i = 0; i < count; i++) {
      const server = createServer();
      servers.push(server);
      ports.push(
        await new Promise<number>((resolve, reject) => {
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => {
            const address = server.address();
            const port = typeof address === 'object' && address !== null ? address.port : 0;
            if (port > 0) resolve(port);
            else reject(new Error('no port assigned'));
          });
        }),
      );
    }
    return ports;
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
}

export function logTail(logPath: string, lines = 40): string {
  try {
    const text = readFileSync(logPath, 'utf8');
    return text.split('\n').slice(-lines).join('\n');
  } catch {
    return `(no log at ${logPath})`;
  }
}

/** Polls `probe` until it resolves true, the process dies, or timeoutMs passes. */
export async function waitUntil(
  what: string,
  proc: ServiceProcess,
  probe: () => Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (proc.child.exitCode !== null || proc.child.signalCode !== null) {
      throw new Error(
        `${what}: process exited early (code ${String(proc.child.exitCode)}, signal ${String(proc.child.signalCode)}); ` +
          `log tail of ${proc.logPath}:\n${logTail(proc.logPath)}`,
      );
    }
    try {
      if (await probe()) return;
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const reason = lastError instanceof Error ? ` (last probe error: ${lastError.message})` : '';
  throw new Error(`${what}: not ready after ${timeoutMs} ms${reason}; log tail of ${proc.logPath}:\n${logTail(proc.logPath)}`);
}
