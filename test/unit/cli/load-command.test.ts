import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../../src/cli/main.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

// A BullMQ config whose Redis cannot answer: every case below must fail before connecting.
const dir = tempDir('npu-fleet-load-');
const config = join(dir, 'fleet.yaml');
writeFileSync(config, 'transport:\n  kind: bullmq\n  bullmq: { redisUrl: "redis://127.0.0.1:1", connectTimeoutMs: 300 }\n');
const memoryConfig = join(dir, 'memory.yaml');
writeFileSync(memoryConfig, 'transport: { kind: memory }\n');

let stderr: string[] = [];
let stdout: string[] = [];
beforeEach(() => {
  stderr = [];
  stdout = [];
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (stderr.push(String(chunk)), true));
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => (stdout.push(String(chunk)), true));
});
afterEach(() => vi.restoreAllMocks());

describe('npu-fleet load / frames argument checks (before anything is sent)', () => {
  it.each([
    [['load', '--rate', '0'], '--rate must be an integer from 1 to 1000000, got "0"'],
    [['load', '--deadline-ms', '500-50'], '--deadline-ms must be MS or LO-HI whole milliseconds (e.g. 50-500), got "500-50"'],
    [['load', '--deadline-ms', 'soon'], '--deadline-ms must be MS or LO-HI whole milliseconds (e.g. 50-500), got "soon"'],
    [['load', '--deadline-share', '1.5'], '--deadline-share must be a number from 0 to 1, got "1.5"'],
    [['load', '--seconds=-1'], '--seconds must be a positive number of seconds, got "-1"'],
    [['load', '--priority', '3'], 'priority must be from 0 to 2: model mlp-classifier has 3 priority levels, got 3'],
    [['frames', '--fps', '0'], '--fps must be a number of frames per second above 0 and at most 1000 (e.g. 25 or 29.97), got "0"'],
    [['frames', '--fps', '1000.5'], '--fps must be a number of frames per second above 0 and at most 1000 (e.g. 25 or 29.97), got "1000.5"'],
    [['frames', '--streams', 'x'], '--streams must be an integer from 1 to 100000, got "x"'],
    [['frames', '--deadline-ms', '0'], '--deadline-ms must be a positive whole number of milliseconds, got "0"'],
    // deadlineAt is whole epoch ms: a fraction (1000/30 fps) made every frame invalid, each counted as no reply.
    [['frames', '--deadline-ms', '33.3'], '--deadline-ms must be a positive whole number of milliseconds, got "33.3"'],
    [['load', '--deadline-ms', '50.5-500'], '--deadline-ms must be MS or LO-HI whole milliseconds (e.g. 50-500), got "50.5-500"'],
    [['load', '--bogus'], 'unknown option --bogus (run npu-fleet load --help)'],
  ])('%j exits 2 naming the flag', async (args, message) => {
    const [command, ...rest] = args as [string, ...string[]];
    expect(await main([command, '--config', config, '--model', 'mlp-classifier', ...rest])).toBe(2);
    expect(stderr.join('')).toBe(`npu-fleet: ${message}\n`);
  });

  it('a model is required and must exist; frames takes one; the memory broker is refused', async () => {
    expect(await main(['load', '--config', config])).toBe(2);
    expect(stderr.join('')).toMatch(/--model NAME is required \(several: --model a,b\)/);
    // No name among the commas: it ran with no model and crashed on the first tick.
    stderr = [];
    expect(await main(['load', '--config', config, '--model', ' , '])).toBe(2);
    expect(stderr.join('')).toMatch(/--model NAME is required \(several: --model a,b\)/);
    stderr = [];
    expect(await main(['load', '--config', config, '--model', 'mlp-classifier,nope'])).toBe(2);
    // The default repository: the install's own examples/models (whatever the working directory).
    expect(stderr.join('')).toContain(`model nope is not in ${join(fileURLToPath(new URL('../../../', import.meta.url)), 'examples/models')}`);
    stderr = [];
    expect(await main(['frames', '--config', config, '--model', 'mlp-classifier,small-cnn'])).toBe(2);
    expect(stderr.join('')).toMatch(/--model names one model for frames/);
    stderr = [];
    expect(await main(['load', '--config', memoryConfig, '--model', 'mlp-classifier'])).toBe(2);
    expect(stderr.join('')).toMatch(/load and frames need a Kafka or BullMQ transport/);
  });

  it('--help prints each usage and exits 0', async () => {
    expect(await main(['load', '--help'])).toBe(0);
    expect(await main(['frames', '--help'])).toBe(0);
    expect(stdout.join('')).toMatch(/npu-fleet load --model NAME.*\n[\s\S]*npu-fleet frames --model NAME/);
  });

  it('--help lists --drain-ms, which the summary names when replies are still out', async () => {
    for (const command of ['load', 'frames']) {
      stdout = [];
      expect(await main([command, '--help'])).toBe(0);
      expect(stdout.join('')).toMatch(/\[--drain-ms MS\][\s\S]*--drain-ms \(default 5000\)/);
    }
  });
});
