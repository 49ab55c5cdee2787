import type { FleetConfig } from '../contracts/fleet-config.ts';
import type { ModelConfig } from '../contracts/model-config.ts';
import type { Logger } from '../observability/logger.ts';
import { MemoryProducer } from '../producer/memory-producer.ts';
import { MemoryBroker } from '../transport/memory/memory-broker.ts';
import { MemoryTransport } from '../transport/memory/memory-transport.ts';
import { DemoStats, prng, syntheticRequest } from './demo-load.ts';
import { scanRepository } from './model-repository.ts';
import { runWorker, type RunningWorker, type WorkerDeps } from './worker-process.ts';

export interface EmbeddedFleet {
  readonly workers: readonly RunningWorker[];
  readonly broker: MemoryBroker;
  stop(): Promise<number>;
}

/**
 * The embedded default behind `npm start`: an in-process memory broker, one worker per simulated
 * device in this process (the memory broker cannot cross processes), and optionally the built-in
 * demo load with a one-line-a-second report.
 */
export async function startEmbeddedFleet(
  config: FleetConfig,
  deps: Omit<WorkerDeps, 'createTransport'>,
  /** Root logger: each worker binds its own component and device. */
  log: Logger,
  /**
   * Where the report lines go. No default: process.stdout.write alone crashed the fleet with an
   * unhandled EPIPE once stdout's reader had gone (`npm start | head -1`); the CLI passes a printer
   * that survives that (src/cli/stdout-lines.ts) and drains the fleet.
   */
  print: (line: string) => void,
  /** A worker's start-up ran past worker.startTimeoutMs (logged): the process should exit EXIT_START_TIMEOUT. */
  onStartTimeout?: () => void,
): Promise<EmbeddedFleet> {
  const broker = new MemoryBroker();
  const workers: RunningWorker[] = [];
  for (let deviceId = 0; deviceId < config.devices.count; deviceId++) {
    // No supervisor in one process to restart a worker whose device hung: its broker session ends
    // (what it held goes to the other devices' workers; the hung batch's requests as suspects),
    // and the device stays out of service until the fleet restarts.
    const late: { running?: RunningWorker } = {};
    const onHang = (): void => {
      log.error({ device: deviceId }, 'device hung: its worker stops taking work and hands back what it held; restart npu-fleet to use the device again');
      void late.running?.abandon();
    };
    const running = await runWorker(config, deviceId, { ...deps, createTransport: () => new MemoryTransport({ broker }) }, {
      log,
      metricsPort: config.worker.metricsPort === 0 ? 0 : config.worker.metricsPort + deviceId,
      onHang,
      ...(onStartTimeout === undefined ? {} : { onStartTimeout }),
    }).catch(async (err: unknown) => {
      // The fleet does not start: the workers already up would otherwise go on serving their ports
      // and holding their devices in a caller that does not exit at once.
      await Promise.allSettled(workers.map((w) => w.stop()));
      throw err;
    });
    late.running = running;
    workers.push(running);
  }
  print(`npu-fleet: ${workers.length} worker(s) on the memory broker; metrics at ${workers.map((w) => `http://127.0.0.1:${w.metricsPort}/metrics`).join(' ')}`);

  let demoTimer: NodeJS.Timeout | undefined;
  let reportTimer: NodeJS.Timeout | undefined;
  const producer = new MemoryProducer({ broker });
  if (config.demo.enabled) {
    const snapshot = scanRepository(config.modelRepository, { artifact: deps.artifact, only: config.models });
    const models = [...snapshot.models.values()].filter((m) => m.served.length > 0).map((m) => m.config);
    const stats = new DemoStats();
    await producer.subscribeReplies('demo.replies', (r) => stats.add(r));
    const rand = prng(42);
    const rate = config.demo.requestsPerSecond;
    let seq = 0;
    const tickMs = 20;
    const startedAt = Date.now();
    demoTimer = setInterval(() => {
      // Due by the end of this tick, from the start: the workers share this event loop, and a
      // share per tick lowered the rate unseen whenever ticks ran late. Over a second behind (a
      // process stopped for a while) the rest is let go rather than sent in one burst.
      const due = Math.floor(((Date.now() - startedAt + tickMs) * rate) / 1000);
      seq = Math.max(seq, due - Math.ceil(rate));
      const batch = [];
      for (; seq < due && models.length > 0; seq++) {
        const model = models[seq % models.length] as ModelConfig;
        batch.push(syntheticRequest(model, seq, rand, { idPrefix: 'demo', replyTo: 'demo.replies', deadlineShare: 0.5, deadlineMs: [30, 400] }));
      }
      if (batch.length) void producer.publish(batch).catch((err: unknown) => log.error({ err }, 'demo publish failed'));
    }, tickMs);
    let last = Date.now();
    reportTimer = setInterval(() => {
      const now = Date.now();
      print(stats.line(now - last));
      last = now;
    }, 1000);
  }

  return {
    workers,
    broker,
    async stop() {
      if (demoTimer) clearInterval(demoTimer);
      if (reportTimer) clearInterval(reportTimer);
      // All at once, like the supervisor's SIGTERM: one after another would take up to N drain
      // timeouts, and the workers not yet stopping would keep taking work meanwhile.
      const codes = await Promise.all(workers.map((w) => w.stop()));
      await producer.close();
      return Math.max(0, ...codes);
    },
  };
}
