import { spawn, type ChildProcess } from 'node:child_process';
import { basename } from 'node:path';
import { afterEach } from 'vitest';

export interface FixtureExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface FixtureProcess {
  readonly child: ChildProcess;
  /** Its stdout's lines so far, without their '\n'; the same array grows as more arrive. */
  readonly lines: readonly string[];
  /** Once it has exited and its stdout has been read to the end (the last unterminated line, if any, is in `lines`). */
  readonly exited: Promise<FixtureExit>;
  /** The first line matching `pattern` (no g or y flag); rejects naming what it saw if it exits first or `timeoutMs` pass. */
  until(pattern: RegExp, timeoutMs: number): Promise<string>;
  /** Once `count` lines match `pattern`: all the lines that match; rejects as `until` does. */
  untilCount(pattern: RegExp, count: number, timeoutMs: number): Promise<string[]>;
}

/**
 * A TypeScript fixture in a node process of its own (`node --import tsx PATH ARGS`), its stdout
 * split into lines, its stderr passed through to the test's. Nothing kills it: see
 * `fixtureProcesses` for a test file's children.
 */
export function spawnFixture(path: string, args: readonly string[]): FixtureProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', path, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const name = basename(path);
  const lines: string[] = [];
  // Each pending until's check: run whenever a line arrives or the process ends.
  const waiters = new Set<() => void>();
  const wake = (): void => {
    for (const w of [...waiters]) w();
  };
  let buf = '';
  // Decoded as a stream, so a character split across two chunks stays whole.
  child.stdout?.setEncoding('utf8');
  child.stdout?.on('data', (chunk: string) => {
    buf += chunk;
    const parts = buf.split('\n');
    buf = parts.pop() ?? '';
    if (parts.length === 0) return;
    lines.push(...parts);
    wake();
  });
  let ended: FixtureExit | Error | undefined;
  // 'close', not 'exit': 'exit' can come before the last of its stdout has been read.
  const exited = new Promise<FixtureExit>((resolve) => {
    child.once('close', (code, signal) => {
      if (buf !== '') lines.push(buf);
      buf = '';
      const exit = { code, signal };
      ended = exit;
      resolve(exit);
      wake();
    });
  });
  child.once('error', (e) => {
    ended ??= e;
    wake();
  });

  const state = (): string => {
    if (ended === undefined) return `${name} (pid ${child.pid}) still running`;
    if (ended instanceof Error) return `${name} failed to run: ${ended.message}`;
    return ended.signal !== null ? `${name} exited on ${ended.signal}` : `${name} exited with code ${ended.code}`;
  };
  const seen = (): string => (lines.length === 0 ? 'no lines' : `${lines.length} line(s): ${lines.join(' | ')}`);

  const untilCount = (pattern: RegExp, count: number, timeoutMs: number): Promise<string[]> =>
    new Promise((resolve, reject) => {
      const matching = (): string[] => lines.filter((l) => pattern.test(l));
      const stop = (): void => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      const fail = (why: string): void => {
        stop();
        reject(new Error(`${why} ${count} line(s) matching ${pattern} (${matching().length} did); ${state()}; ${seen()}`));
      };
      const check = (): void => {
        const found = matching();
        if (found.length >= count) {
          stop();
          resolve(found);
        } else if (ended !== undefined) {
          fail(`${name} ended before`);
        }
      };
      const timer = setTimeout(() => fail(`${timeoutMs} ms passed before`), timeoutMs);
      waiters.add(check);
      check();
    });
  const until = async (pattern: RegExp, timeoutMs: number): Promise<string> => {
    const [first] = await untilCount(pattern, 1, timeoutMs);
    return first as string;
  };

  return { child, lines, exited, until, untilCount };
}

/**
 * For a test file: returns `spawnFixture`, whose processes are SIGKILLed after the test that
 * started them (a test that fails midway must not leave a worker in its group for the next one).
 */
export function fixtureProcesses(): typeof spawnFixture {
  const running: FixtureProcess[] = [];
  afterEach(async () => {
    const left = running.splice(0);
    for (const p of left) p.child.kill('SIGKILL');
    // A process that never started has no close to wait for.
    await Promise.all(left.filter((p) => p.child.pid !== undefined).map((p) => p.exited));
  });
  return (path, args) => {
    const p = spawnFixture(path, args);
    running.push(p);
    return p;
  };
}
