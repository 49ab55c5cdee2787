import { spawn } from 'node:child_process';

/**
 * `npu-fleet ARGS` (bin/npu-fleet.js, from the repository root) as a child process: its stdout and
 * stderr together as they arrived, its JSON log lines by message, and how it exited. `env` is laid
 * over this process's; `detached` puts it in its own process group, as a shell runs it (a test can
 * then signal the group, workers included).
 */
export function spawnCli(args: readonly string[], env: Record<string, string> = {}, options: { detached?: boolean } = {}) {
  const child = spawn(process.execPath, ['bin/npu-fleet.js', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached === true,
  });
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (out += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  /** The JSON log lines whose msg is `msg`, parsed. */
  const lines = (msg: string): Array<Record<string, unknown>> =>
    out
      .split('\n')
      .filter((l) => l.startsWith('{') && l.includes(`"msg":"${msg}"`))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { child, exited, output: (): string => out, lines };
}
