import { spawn } from 'node:child_process';

/**
 * `npu-fleet ARGS | head -N` as a child process: once `lines` lines have come out on stdout, the
 * pipe's only read end is closed, so the next write meets EPIPE. stdout up to then and stderr are
 * kept apart (the EPIPE handling speaks on stderr). `env` is laid over this process's.
 */
export function spawnCliHead(args: readonly string[], lines: number, env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['bin/npu-fleet.js', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => {
    stdout += b.toString();
    if (stdout.split('\n').length > lines) child.stdout.destroy();
  });
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return { child, exited, stdout: (): string => stdout, stderr: (): string => stderr };
}
