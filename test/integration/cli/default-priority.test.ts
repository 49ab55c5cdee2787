// A request that names no priority is served at its model's defaultPriority by the worker, so the
// CLI must also route it there: sent as priority 0 it was fetched ahead of everything else (BullMQ
// priority 1, the Kafka p0 topic) while scheduled as a default-priority request, so a data set or a
// camera without --priority jumped ahead of interactive traffic. Real Redis; no worker needed: the
// jobs are read back as queued.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { stringify } from 'yaml';
import { main } from '../../../src/cli/main.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

beforeEach(() => {
  vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
});
afterEach(() => vi.restoreAllMocks());

/** The BullMQ job priorities of the model's request queue (BullMQ priority = fleet priority + 1). */
async function queuedPriorities(prefix: string): Promise<number[]> {
  const queue = new Queue('mlp-classifier.requests', { connection: { url: getServices().redisUrl } as never, prefix });
  try {
    const jobs = await queue.getJobs(['prioritized', 'wait']);
    return [...new Set(jobs.map((j) => j.opts.priority ?? 0))].sort();
  } finally {
    await queue.close();
  }
}

function fleetConfig(prefix: string): string {
  const file = join(tempDir('npu-fleet-default-priority-'), 'fleet.yaml');
  const transport = { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } };
  writeFileSync(file, stringify({ transport, modelRepository: 'examples/models', models: ['mlp-classifier'], log: { level: 'warn' } }));
  return file;
}

describe("requests without a priority go out at the model's defaultPriority (mlp-classifier: 1)", () => {
  it('frames without --priority', { timeout: 60_000 }, async () => {
    const prefix = uniqueName('dfltprio');
    await main(['frames', '--config', fleetConfig(prefix), '--model', 'mlp-classifier', '--streams', '1', '--fps', '10', '--seconds', '1', '--timeout-ms', '200', '--drain-ms', '200']);
    expect(await queuedPriorities(prefix)).toEqual([2]);
  });

  it('frames --priority 0 still goes out at 0', { timeout: 60_000 }, async () => {
    const prefix = uniqueName('dfltprio');
    await main(['frames', '--config', fleetConfig(prefix), '--model', 'mlp-classifier', '--streams', '1', '--fps', '10', '--seconds', '1', '--priority', '0', '--timeout-ms', '200', '--drain-ms', '200']);
    expect(await queuedPriorities(prefix)).toEqual([1]);
  });

  it('publish --file: lines without a priority at the default, lines with one at theirs', { timeout: 60_000 }, async () => {
    const prefix = uniqueName('dfltprio');
    const dir = tempDir('npu-fleet-default-priority-data-');
    const data = join(dir, 'data.jsonl');
    const input = [{ name: 'input', dtype: 'float32', shape: [1, 64], data: Buffer.alloc(256).toString('base64') }];
    const lines = [
      { id: `${prefix}-a`, model: 'mlp-classifier', inputs: input },
      { id: `${prefix}-b`, model: 'mlp-classifier', priority: 2, inputs: input },
      { id: `${prefix}-c`, model: 'mlp-classifier', inputs: input },
    ];
    writeFileSync(data, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
    expect(await main(['publish', '--config', fleetConfig(prefix), '--file', data])).toBe(0);
    expect(await queuedPriorities(prefix)).toEqual([2, 3]);
  });
});
