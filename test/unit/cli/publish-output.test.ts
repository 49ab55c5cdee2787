import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WriteStream } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ResultFile } from '../../../src/cli/publish-output.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const dir = tempDir('npu-fleet-publish-output-');
const result = (i: number): ResultEnvelope => ({
  id: `r${i}`,
  model: 'm',
  version: '1',
  status: 'ok',
  outputs: [{ name: 'y', dtype: 'float32', shape: [1, 1000], data: new Uint8Array(4000) }],
  timings: { queuedMs: 0, batchWaitMs: 0, deviceMs: 0, totalMs: 0 },
  batchSize: 1,
  gear: 1,
  device: 0,
  worker: 'w',
  completedAt: 1,
});

describe('ResultFile', () => {
  it('many records written at once while the file is behind: no listener piles up on the stream, no warning', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    const path = join(dir, 'burst.jsonl');
    const file = await ResultFile.open(path, false);
    const stream = Reflect.get(file, 'stream') as WriteStream;
    const baseline = ['drain', 'close', 'error'].map((e) => stream.listenerCount(e));
    try {
      // A bulk run settles up to --in-flight replies at once; each record is ~5 KB of base64.
      for (let round = 0; round < 20; round++) await Promise.all(Array.from({ length: 50 }, (_, i) => file.write(result(round * 50 + i))));
      // Every waiter once left a 'close' and an 'error' listener behind until the end of the run.
      expect(['drain', 'close', 'error'].map((e) => stream.listenerCount(e))).toEqual(baseline);
      await file.close();
      await new Promise((r) => setTimeout(r, 50));
      expect(warnings).toEqual([]);
      expect(readFileSync(path, 'utf8').trim().split('\n')).toHaveLength(1000);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
