import { loadModelConfig, parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { ModelConfig } from '../../../src/contracts/model-config.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { DeviceWorker } from '../../../src/runtime/device-worker.ts';
import type { DeviceLike, ExecutableModel } from '../../../src/runtime/load-checked.ts';
import type { RepositorySnapshot } from '../../../src/runtime/model-repository.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { until as untilHelper } from '../../helpers/until.ts';

export const MODEL = 'mlp-classifier';
export const modelConfig: ModelConfig = loadModelConfig(`examples/models/${MODEL}/config.yaml`);

/** A repository snapshot serving these versions of mlp-classifier (none: the model is gone). */
export function snapshotOf(...versions: string[]): RepositorySnapshot {
  return snapshotWith(modelConfig, ...versions);
}

/** The same with `config` as the model's config.yaml. */
export function snapshotWith(config: ModelConfig, ...versions: string[]): RepositorySnapshot {
  const served = versions.map((version) => ({ model: MODEL, version, artifactPath: `/fake/${MODEL}/${version}/model.onnx`, modifiedAt: 1 }));
  return { dir: '/fake', models: new Map([[MODEL, { name: MODEL, config, versions: served, served }]]), problems: [] };
}

interface Execution {
  readonly version: string;
  readonly gear: number;
  release(): void;
  /** Ends the batch with `error`, as a device fault would. */
  fail(error: Error): void;
}

/**
 * A device whose batches finish only when the test releases them, recording which version each
 * batch ran on and which versions are loaded, so reload and drain orderings can be forced.
 */
export function controlledDevice(opts: { unloadWaitsForExecutions?: boolean } = {}) {
  const executions: Execution[] = [];
  const running = new Map<string, number>();
  // As the native binding does: unload and close wait for the executions still on the device.
  let idleWaiters: Array<() => void> = [];
  const runningTotal = (): number => [...running.values()].reduce((a, b) => a + b, 0);
  const whenIdle = (): Promise<void> =>
    opts.unloadWaitsForExecutions !== true || runningTotal() === 0 ? Promise.resolve() : new Promise((r) => idleWaiters.push(r));
  const loaded = new Set<string>();
  const unloadedWhileRunning: string[] = [];
  const device: DeviceLike = {
    id: 0,
    memInfo: () => Promise.resolve({ freeBytes: 1, totalBytes: 2 }),
    close: () => whenIdle(),
    loadModel(path: string): Promise<ExecutableModel> {
      const version = path.split('/').at(-2) as string;
      loaded.add(version);
      return Promise.resolve({
        gears: [1, 2, 4, 8, 16, 32],
        inputs: [{ name: 'input', dtype: 'float32', dims: [-1, 64] }],
        outputs: [{ name: 'probs', dtype: 'float32', dims: [-1, 10] }],
        execute(_inputs, gear) {
          if (!loaded.has(version)) return Promise.reject(new Error(`version ${version} executed after it was unloaded`));
          running.set(version, (running.get(version) ?? 0) + 1);
          let settled = false;
          // stopWorker releases every execution, including those a test already ended.
          const finished = (): boolean => {
            if (settled) return false;
            settled = true;
            running.set(version, (running.get(version) ?? 1) - 1);
            if (runningTotal() === 0) {
              const waiters = idleWaiters;
              idleWaiters = [];
              for (const w of waiters) w();
            }
            return true;
          };
          return new Promise((resolve, reject) => {
            executions.push({
              version,
              gear,
              release: () => {
                if (!finished()) return;
                resolve({ outputs: [{ data: new Uint8Array(gear * 10 * 4), dims: [gear, 10] }], timings: { copyInMs: 0.1, executeMs: 1, copyOutMs: 0.1 } });
              },
              fail: (error) => {
                if (finished()) reject(error);
              },
            });
          });
        },
        unload() {
          if ((running.get(version) ?? 0) > 0) unloadedWhileRunning.push(version);
          loaded.delete(version);
          return whenIdle();
        },
      });
    },
  };
  return { device, executions, loaded, unloadedWhileRunning };
}

export const until = (cond: () => boolean, ms: number, what: string): Promise<void> => untilHelper(cond, ms, what, 10);

export function request(id: string, priority: number, extra: Partial<RequestEnvelope> = {}): RequestEnvelope {
  return {
    id,
    model: MODEL,
    priority,
    createdAt: Date.now(),
    replyTo: 'test.replies',
    inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: new Uint8Array(64 * 4) }],
    ...extra,
  };
}

/** A started DeviceWorker on a memory broker and a controlled device, with its replies collected. */
export async function startWorker(
  snapshot: RepositorySnapshot,
  worker: Record<string, unknown> = {},
  makeTransport: (broker: MemoryBroker) => MemoryTransport = (broker) => new MemoryTransport({ broker }),
) {
  const dev = controlledDevice();
  const broker = new MemoryBroker();
  const transport = makeTransport(broker);
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
  const config = parseFleetConfig({ devices: { count: 1, backend: 'sim' }, models: [MODEL], worker: { metricsPort: 0, ...worker } });
  const metrics = new FleetMetrics({ processMetrics: false });
  const w = new DeviceWorker({ config, deviceId: 0, device: dev.device, transport, metrics, log, snapshot });
  await w.start();
  const producer = new MemoryProducer({ broker });
  const results = new Map<string, ResultEnvelope[]>();
  await producer.subscribeReplies('test.replies', (r) => results.set(r.id, [...(results.get(r.id) ?? []), r]));
  return { ...dev, worker: w, transport, producer, results, lines, broker, metrics };
}

export type WorkerHarness = Awaited<ReturnType<typeof startWorker>>;

/** For afterEach: lets the device's batches finish, then stops the worker and its producer. */
export async function stopWorker(h: WorkerHarness | undefined): Promise<void> {
  for (const e of h?.executions ?? []) e.release();
  await h?.worker.close();
  await h?.producer.close();
}

/** The sum of the series of `name` whose labels include `labels`, in a Prometheus exposition (0 when absent). */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}
