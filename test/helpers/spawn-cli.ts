import { spawn } from 'node:child_process';

/**
 * `npu-fleet ARGS` (bin/npu-fleet.js, from the repository root) as a child process: its stdout and
 * stderr together as they arrived, and how it exited. `env` is laid over this process's.
 */
export function spawnCli(args: readonly string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['bin/npu-fleet.js', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (out += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return { child, exited, output: (): string => out };
}
