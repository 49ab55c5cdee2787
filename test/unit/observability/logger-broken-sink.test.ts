import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';

/**
 * A process logging with createLogger() to stdout, a pipe: it logs 'ready', and on a line on its stdin
 * logs `lines` lines and exits at once, as a worker does at the end of its drain.
 */
function loggingProcess(lines: number) {
  const script = `
    const { createLogger } = await import('./src/observability/logger.ts');
    const log = createLogger({ level: 'info' });
    log.info('ready');
    process.stdin.once('data', () => {
      for (let i = 0; i < ${lines}; i++) log.info({ i }, 'drained');
      process.exit(0);
    });`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return { child, exited, output: () => out, errors: () => err };
}

describe('logger on a broken stdout', () => {
  it('a pipe whose reader died (EPIPE) neither holds the process at exit nor crashes it', async () => {
    const { child, exited, output, errors } = loggingProcess(3);
    try {
      const readyBy = Date.now() + 20_000;
      while (!output().includes('"msg":"ready"') && Date.now() < readyBy) await new Promise((r) => setTimeout(r, 20));
      expect(output(), errors()).toContain('"msg":"ready"');
      // The reader goes (a log shipper that crashed, `| head -1`): the pipe has no reader left.
      child.stdout.destroy();
      await new Promise((r) => setTimeout(r, 200));
      const askedAt = Date.now();
      child.stdin.write('go\n');
      const result = await Promise.race([exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 5_000))]);
      // It used to write the first line asynchronously and flush the other two at exit, retrying
      // their EPIPE every 100 ms for good.
      expect(result, `still running ${Date.now() - askedAt} ms after its exit; stderr: ${errors()}`).toEqual({ code: 0, signal: null });
    } finally {
      child.kill('SIGKILL');
    }
  }, 30_000);
});
