import { describe, expect, it } from 'vitest';
import { missingWorkerFlags, workerNodeFlags } from '../../../src/runtime/worker-node-flags.ts';

describe('workerNodeFlags / missingWorkerFlags', () => {
  const worker = { maxSemiSpaceMb: 64 };
  it.each([
    { name: 'on the command line (npu-fleet start passes it)', execArgv: ['--max-semi-space-size=64'], nodeOptions: '', missing: [] },
    { name: 'in NODE_OPTIONS (a container per NPU)', execArgv: [], nodeOptions: '--enable-source-maps --max-semi-space-size=64', missing: [] },
    { name: 'with underscores, as V8 also takes it', execArgv: ['--max_semi_space_size=64'], nodeOptions: '', missing: [] },
    { name: 'with another value: the operator chose it', execArgv: ['--max-semi-space-size=16'], nodeOptions: '', missing: [] },
    { name: 'nowhere', execArgv: ['--import', 'tsx'], nodeOptions: '--max-old-space-size=4096', missing: ['--max-semi-space-size=64'] },
  ])('flag given $name', ({ execArgv, nodeOptions, missing }) => {
    expect(missingWorkerFlags(worker, execArgv, nodeOptions)).toEqual(missing);
  });

  it('maxSemiSpaceMb 0 (the Node default) asks for no flag, so none is missing', () => {
    expect(workerNodeFlags({ maxSemiSpaceMb: 0 })).toEqual([]);
    expect(missingWorkerFlags({ maxSemiSpaceMb: 0 }, [], '')).toEqual([]);
  });
});
