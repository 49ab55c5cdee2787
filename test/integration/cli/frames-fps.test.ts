// `npu-fleet frames --fps 29.97`: cameras run at fractional rates (NTSC 29.97, 59.94, 23.976), and
// frames sends at that rate per camera. Real Redis (BullMQ); no worker is needed to count what was
// sent (nothing answers: exit 1, every frame "no reply").
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { stringify } from 'yaml';
import { main } from '../../../src/cli/main.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

let stdout = '';
let stderr = '';
beforeEach(() => {
  stdout = '';
  stderr = '';
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => ((stdout += String(chunk)), true));
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => ((stderr += String(chunk)), true));
});
afterEach(() => vi.restoreAllMocks());

describe('frames at a fractional frame rate', () => {
  it('--fps 29.97: 2 cameras for 2 s send 119 frames, the deadline two frame intervals (67 ms)', { timeout: 60_000 }, async () => {
    const configFile = join(tempDir('npu-fleet-frames-fps-'), 'fleet.yaml');
    const transport = { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('framesfps') } };
    writeFileSync(configFile, stringify({ transport, modelRepository: 'examples/models', models: ['mlp-classifier'], log: { level: 'warn' } }));
    const code = await main(['frames', '--config', configFile, '--model', 'mlp-classifier', '--streams', '2', '--fps', '29.97', '--seconds', '2', '--timeout-ms', '300', '--drain-ms', '500']);
    expect(stderr).not.toMatch(/--fps must/);
    expect(stdout).toMatch(/^frames: 2 stream\(s\) x 29.97 fps of mlp-classifier, deadline 67 ms for 2 s \(bullmq\)\n/);
    const done = stdout.split('\n').find((l) => l.startsWith('done: ')) ?? '';
    expect(done).toMatch(/^done: sent 119 \| no reply 119 \|/);
    expect(code).toBe(1);
  });
});
