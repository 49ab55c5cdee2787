// A changed config.yaml on a running worker: live fields apply to the running lanes, restart-only
// ones (and live ones valid only with them) are warned about and wait for a restart.
import { afterEach, describe, expect, it } from 'vitest';
import { ModelConfigSchema, type ModelConfig } from '../../../src/contracts/model-config.ts';
import { fieldPaths, reloadModelConfig } from '../../../src/runtime/model-config-reload.ts';
import { MODEL, modelConfig, request, snapshotOf, snapshotWith, startWorker, stopWorker, until, type WorkerHarness } from './fake-device-worker.ts';

/** mlp-classifier's config (3 levels, maxQueueDelayMs [0, 2, 20]) with `change` laid over it, validated. */
const edited = (change: Record<string, unknown>): ModelConfig => ModelConfigSchema.parse({ ...modelConfig, ...change });

describe('reloadModelConfig', () => {
  it.each([
    { name: 'nothing changed', change: {}, applied: [], held: [] },
    { name: 'a queue delay', change: { maxQueueDelayMs: [0, 50, 500] }, applied: ['maxQueueDelayMs'], held: [] },
    {
      name: 'every live field',
      change: {
        description: 'new',
        defaultPriority: 2,
        maxQueueDelayMs: [1, 2, 3],
        queue: { softLimitItems: 10, hardLimitItems: 20 },
        lateResults: 'drop',
        targetLatencyMs: 7,
        execTimeoutMs: 99,
        versionPolicy: { kind: 'latest', count: 2 },
        streams: { superseded: 'drop' },
      },
      applied: ['description', 'defaultPriority', 'maxQueueDelayMs', 'queue', 'targetLatencyMs', 'streams', 'execTimeoutMs', 'lateResults', 'versionPolicy'],
      held: [],
    },
    { name: 'tensor layout', change: { inputs: [{ name: 'input', dtype: 'float32', dims: [-1, 32] }] }, applied: [], held: ['inputs'] },
    { name: 'gears', change: { maxBatchSize: 16, batchGears: [1, 4, 16] }, applied: [], held: ['maxBatchSize', 'batchGears'] },
    {
      name: 'more priority levels: the delays and default sized for them wait with them',
      change: { priorityLevels: 4, maxQueueDelayMs: [0, 2, 20, 40], defaultPriority: 3 },
      applied: [],
      held: ['priorityLevels', 'defaultPriority', 'maxQueueDelayMs'],
    },
    {
      name: 'fewer priority levels beside a live change: the live one applies',
      change: { priorityLevels: 2, maxQueueDelayMs: [0, 5], queue: { softLimitItems: 8, hardLimitItems: 16 } },
      applied: ['queue'],
      held: ['priorityLevels', 'maxQueueDelayMs'],
    },
  ])('$name', ({ change, applied, held }) => {
    const next = edited(change);
    const r = reloadModelConfig(modelConfig, next);
    expect(r.applied).toEqual(applied);
    expect(r.held).toEqual(held);
    // The running config takes exactly the applied fields: restart-only ones stay as they run.
    for (const k of Object.keys(modelConfig) as (keyof ModelConfig)[]) {
      expect(r.config[k], k).toEqual((applied as string[]).includes(k) ? next[k] : modelConfig[k]);
    }
    expect(ModelConfigSchema.safeParse(r.config).success).toBe(true);
    if (applied.length === 0) expect(r.config).toBe(modelConfig);
  });

  it('names the keys of an object field that changed', () => {
    const next = edited({ queue: { ...modelConfig.queue, hardLimitItems: 100, softLimitItems: 50 }, streams: { superseded: 'drop' } });
    expect(fieldPaths(['queue', 'streams', 'maxQueueDelayMs'], modelConfig, next)).toEqual(['queue.softLimitItems', 'queue.hardLimitItems', 'streams.superseded', 'maxQueueDelayMs']);
  });
});


let h: WorkerHarness | undefined;
afterEach(async () => {
  await stopWorker(h);
  h = undefined;
});

const APPLIED = 'config.yaml changed; applied to the running worker';
const HELD = 'config.yaml changed in fields a running worker cannot apply; they apply to workers started from now on (restart the workers to apply them)';

describe('a running worker and a changed config.yaml', () => {
  it('takes on a lowered maxQueueDelayMs in its default and pinned lanes without a restart', async () => {
    const slow = edited({ maxQueueDelayMs: [0, 60_000, 60_000] });
    h = await startWorker(snapshotWith(slow, '1', '2'));
    const { producer, executions, results, worker, lines } = h;
    await producer.publish(request('default-lane', 2));
    await producer.publish(request('pinned-lane', 2, { version: '1' }));
    await new Promise((r) => setTimeout(r, 150));
    // A minute's delay: nothing is on the device yet.
    expect(executions).toHaveLength(0);

    await worker.applySnapshot(snapshotWith(edited({ maxQueueDelayMs: [0, 60_000, 5] }), '1', '2'));
    // Both lanes' requests have waited past the new 5 ms: each lane sends its batch at once.
    await until(() => executions.length === 2, 2000, 'both lanes to dispatch on the new delay');
    expect(executions.map((e) => e.version).sort()).toEqual(['1', '2']);
    for (const e of executions) e.release();
    await until(() => results.has('default-lane') && results.has('pinned-lane'), 2000, 'both results');
    expect(results.get('default-lane')).toMatchObject([{ status: 'ok', version: '2' }]);
    expect(results.get('pinned-lane')).toMatchObject([{ status: 'ok', version: '1' }]);
    expect(lines.filter((l) => l.msg === APPLIED)).toEqual([expect.objectContaining({ level: 30, model: MODEL, fields: ['maxQueueDelayMs'] })]);
    expect(lines.some((l) => l.msg === HELD)).toBe(false);
    // The same config again (a poll with another change elsewhere): nothing more to apply or say.
    await worker.applySnapshot(snapshotWith(edited({ maxQueueDelayMs: [0, 60_000, 5] }), '1', '2'));
    expect(lines.filter((l) => l.msg === APPLIED)).toHaveLength(1);
  });

  it('warns about a priorityLevels change, naming it, and keeps the levels it runs with; a live field beside it applies', async () => {
    h = await startWorker(snapshotOf('1'));
    const { producer, results, worker, lines, executions } = h;
    await worker.applySnapshot(snapshotWith(edited({ priorityLevels: 4, maxQueueDelayMs: [0, 2, 20, 20], queue: { ...modelConfig.queue, hardLimitItems: 5000 } }), '1'));
    expect(lines.filter((l) => l.msg === HELD)).toEqual([expect.objectContaining({ level: 40, model: MODEL, fields: ['priorityLevels', 'maxQueueDelayMs'] })]);
    expect(lines.filter((l) => l.msg === APPLIED)).toEqual([expect.objectContaining({ model: MODEL, fields: ['queue.hardLimitItems'] })]);

    // Still three levels: priority 3 is refused, 0..2 are served.
    await producer.publish(request('p3', 3));
    await until(() => results.has('p3'), 2000, 'the answer to priority 3');
    expect(results.get('p3')?.[0]?.status).toBe('invalid');
    expect(results.get('p3')?.[0]?.error?.message).toMatch(/has 3 levels/);
    await producer.publish(request('p0', 0));
    await until(() => executions.length === 1, 2000, 'p0 on the device');
    executions[0]!.release();
    await until(() => results.has('p0'), 2000, 'the result of p0');
    expect(results.get('p0')).toMatchObject([{ status: 'ok' }]);

    // Told once per change of the file, not again at each later reload.
    await worker.applySnapshot(snapshotWith(edited({ priorityLevels: 4, maxQueueDelayMs: [0, 2, 20, 20], queue: { ...modelConfig.queue, hardLimitItems: 5000 } }), '1', '2'));
    expect(lines.filter((l) => l.msg === HELD)).toHaveLength(1);
  });
});
