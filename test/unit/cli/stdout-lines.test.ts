import { createConnection, createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { closedBy, onStdoutClosed, printLine } from '../../../src/cli/stdout-lines.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const closers: Array<() => void> = [];
afterEach(() => closers.splice(0).forEach((c) => c()));

/** A real stream socket whose reader has closed its end: the next writes fail with EPIPE, as stdout's do under `| head -1`. */
async function pipeWithoutReader(): Promise<Socket> {
  const path = join(tempDir('npu-fleet-stdout-lines-'), 'reader.sock');
  const server = createServer((reader) => reader.destroy());
  closers.push(() => server.close());
  await new Promise<void>((r) => server.listen(path, r));
  // Half-open: its writes go to the peer that closed (EPIPE), not into a write-after-end of its own.
  const writer = createConnection({ path, allowHalfOpen: true });
  closers.push(() => writer.destroy());
  await new Promise((r) => writer.once('connect', r));
  await new Promise((r) => writer.once('end', r));
  return writer;
}

describe('stdout lines', () => {
  it('a write to a pipe whose reader has gone ends the output (EPIPE reported once) instead of an unhandled error event', async () => {
    const pipe = await pipeWithoutReader();
    const closes: string[] = [];
    onStdoutClosed((code) => closes.push(code), pipe);
    printLine('first', pipe);
    await new Promise((r) => setTimeout(r, 50));
    printLine('second', pipe);
    await new Promise((r) => setTimeout(r, 50));
    expect(closes).toEqual(['EPIPE']);
    expect(closedBy(pipe)).toBe('EPIPE');
    // Subscribed late: told at once, not never.
    const late = await new Promise<string>((resolve) => onStdoutClosed(resolve, pipe));
    expect(late).toBe('EPIPE');
  });

  it('an unsubscribed handler is not called', async () => {
    const pipe = await pipeWithoutReader();
    const closes: string[] = [];
    const off = onStdoutClosed((code) => closes.push(code), pipe);
    off();
    printLine('line', pipe);
    await new Promise((r) => setTimeout(r, 50));
    expect(closes).toEqual([]);
    expect(closedBy(pipe)).toBe('EPIPE');
  });
});
