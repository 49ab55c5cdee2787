import { readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { InflightJournal, inflightJournalPath } from '../../../src/runtime/inflight-journal.ts';
import { predecessorNotePath } from '../../../src/runtime/predecessor-note.ts';
import { runWorker, type RunningWorker } from '../../../src/runtime/worker-process.ts';
import type { DeviceLike } from '../../../src/runtime/load-checked.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { MODEL, controlledDevice, request, until } from './fake-device-worker.ts';

const config = parseFleetConfig({ modelRepository: 'examples/models', models: [MODEL], devices: { count: 1, backend: 'sim' }, worker: { metricsPort: 0 } });

async function listen(port = 0): Promise<Server> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '0.0.0.0', resolve);
  });
  return server;
}
const portOf = (s: Server): number => (s.address() as { port: number }).port;
const closeServer = (s: Server): Promise<void> => new Promise((resolve) => s.close(() => resolve()));

/** A port that was free a moment ago. */
async function freePort(): Promise<number> {
  const s = await listen();
  const port = portOf(s);
  await closeServer(s);
  return port;
}

const started: RunningWorker[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map(async (w) => w.stop()));
});

describe('runWorker: the metrics/health edge', () => {
  it('answers /healthz (200) and /readyz (503 starting) while the device opens and models load, then ready', async () => {
    const port = await freePort();
    const dev = controlledDevice();
    let opened: (d: DeviceLike) => void = () => undefined;
    const broker = new MemoryBroker();
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const running = runWorker(
      config,
      0,
      { artifact: 'onnx', openDevice: () => new Promise<DeviceLike>((resolve) => (opened = resolve)), createTransport: () => new MemoryTransport({ broker }) },
      { log, metricsPort: port },
    );
    const probe = async (path: string): Promise<number | string> => {
      for (const end = Date.now() + 3000; ; ) {
        try {
          return (await fetch(`http://127.0.0.1:${port}${path}`)).status;
        } catch (err) {
          if (Date.now() > end) return `unreachable: ${String(err)}`;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    };
    // A liveness probe that cannot connect during a long model load restarts the pod.
    expect(await probe('/healthz')).toBe(200);
    const starting = await fetch(`http://127.0.0.1:${port}/readyz`);
    expect(starting.status).toBe(503);
    expect(await starting.json()).toEqual({ status: 'not ready', reason: 'starting' });
    expect(lines.some((l) => l.metricsPort === port)).toBe(true);
    opened(dev.device);
    const worker = await running;
    started.push(worker);
    expect(worker.metricsPort).toBe(port);
    expect(await probe('/readyz')).toBe(200);
    expect(await probe('/healthz')).toBe(200);
  });

  it('metricsPort 0 picks a free port and logs it', async () => {
    const dev = controlledDevice();
    const broker = new MemoryBroker();
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const worker = await runWorker(config, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(dev.device), createTransport: () => new MemoryTransport({ broker }) }, { log });
    started.push(worker);
    expect(worker.metricsPort).toBeGreaterThan(0);
    expect(lines.some((l) => l.metricsPort === worker.metricsPort)).toBe(true);
    expect((await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`)).status).toBe(200);
  });

  it('starts past a torn in-flight journal, logging its path and why it is ignored', async () => {
    // A journaled transport's config (the transport itself is the memory broker's: never contacted).
    const cfg = parseFleetConfig({ ...config, transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://127.0.0.1:1' } }, worker: { metricsPort: 0, journalDir: tempDir('npu-fleet-torn-journal-') } });
    const path = inflightJournalPath(cfg, 0) ?? '';
    writeFileSync(path, 'npu-fleet-journal/1 00000040 0123456789abcdef\n[[["q/1",0]');
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const worker = await runWorker(cfg, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(controlledDevice().device), createTransport: () => new MemoryTransport({ broker: new MemoryBroker() }) }, { log });
    started.push(worker);
    expect(lines.filter((l) => l.path === path && typeof l.reason === 'string').map((l) => l.reason)).toEqual([expect.stringMatching(/^torn: \d+ of 40 bytes/)]);
  });

  it("a second worker for a device whose worker still runs leaves that worker's in-flight journal alone: no suspects, not cleared", async () => {
    // Scaling up with the same config (`npu-fleet worker --device N` beside a fleet): the journal
    // and the owner note are the live worker's. Its batches were counted as a dead worker's
    // suspects ("the previous worker of this device died with a batch on the device").
    const cfg = parseFleetConfig({ ...config, transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://127.0.0.1:1' } }, worker: { metricsPort: 0, journalDir: tempDir('npu-fleet-live-journal-') } });
    const path = inflightJournalPath(cfg, 0) ?? '';
    const live = new InflightJournal(path);
    live.record(['[["q/1",0],["q/2",0]]']);
    live.close();
    const before = readFileSync(path, 'utf8');
    writeFileSync(predecessorNotePath(path), JSON.stringify({ pid: process.ppid, host: hostname(), note: '{}' }));
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const worker = await runWorker(cfg, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(controlledDevice().device), createTransport: () => new MemoryTransport({ broker: new MemoryBroker() }) }, { log });
    started.push(worker);
    expect(lines.map((l) => l.msg)).toContain('the previous worker of this device is still running: what it holds is left to it');
    expect(lines.filter((l) => typeof l.msg === 'string' && l.msg.includes('died with a batch'))).toEqual([]);
    expect(readFileSync(path, 'utf8')).toBe(before);
  });

  it('exports worker restarts from the first incarnation on (0), so the first restart shows in increase()', async () => {
    const broker = new MemoryBroker();
    const deps = { artifact: 'onnx' as const, openDevice: () => Promise.resolve(controlledDevice().device), createTransport: () => new MemoryTransport({ broker }) };
    const restartsOf = async (w: RunningWorker): Promise<string | undefined> =>
      /^npu_fleet_worker_restarts_total\{device="0",worker="device-0"\} (\S+)$/m.exec(await w.metrics.render())?.[1];
    const first = await runWorker(config, 0, deps, { log: createLogger({ level: 'silent' }), metricsPort: 0 });
    started.push(first);
    expect(await restartsOf(first)).toBe('0');
    const third = await runWorker(config, 0, deps, { log: createLogger({ level: 'silent' }), metricsPort: 0, restarts: 2 });
    started.push(third);
    expect(await restartsOf(third)).toBe('2');
  });

  it('a metrics port in use fails the start naming worker.metricsPort, before the device opens or the broker is joined', async () => {
    const blocker = await listen();
    const port = portOf(blocker);
    let opened = 0;
    let transports = 0;
    try {
      const attempt = runWorker(
        config,
        0,
        {
          artifact: 'onnx',
          openDevice: () => ((opened += 1), Promise.resolve(controlledDevice().device)),
          createTransport: () => ((transports += 1), new MemoryTransport({ broker: new MemoryBroker() })),
        },
        { log: createLogger({ level: 'silent' }), metricsPort: port },
      );
      await expect(attempt).rejects.toSatisfy((e: unknown) => FleetError.is(e) && e.message.includes('worker.metricsPort') && e.message.includes(String(port)));
    } finally {
      await closeServer(blocker);
    }
    expect([opened, transports]).toEqual([0, 0]);
  });

  it('a models entry the repository does not hold is named: an error when none is there, a warning beside others', async () => {
    const deps = { artifact: 'onnx' as const, openDevice: () => Promise.resolve(controlledDevice().device), createTransport: () => new MemoryTransport({ broker: new MemoryBroker() }) };
    // A typo used to fail as "no servable model in examples/models", which models validate contradicts.
    const typo = parseFleetConfig({ ...config, models: ['mlp-clasifier'] });
    await expect(runWorker(typo, 0, deps, { log: createLogger({ level: 'silent' }), metricsPort: 0 })).rejects.toThrow(
      /^models lists mlp-clasifier, which examples\/models does not hold \(no mlp-clasifier\/config\.yaml\): fix the name in models/,
    );
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const worker = await runWorker(parseFleetConfig({ ...config, models: [MODEL, 'nope'] }), 0, deps, { log, metricsPort: 0 });
    started.push(worker);
    expect(lines.filter((l) => l.level === 40 && String(l.msg).includes('models lists nope'))).toHaveLength(1);
  });

  it('a start that fails after the server listens releases the port', async () => {
    const port = await freePort();
    const attempt = runWorker(
      config,
      0,
      { artifact: 'onnx', openDevice: () => Promise.reject(new FleetError('DEVICE_ERROR', 'no such device')), createTransport: () => new MemoryTransport({ broker: new MemoryBroker() }) },
      { log: createLogger({ level: 'silent' }), metricsPort: port },
    );
    await expect(attempt).rejects.toThrow('no such device');
    // The supervisor's next worker of this device binds the same port.
    await closeServer(await listen(port));
  });
});

describe('runWorker: a device that fails every batch', () => {
  it('turns /readyz 503 at once and /healthz 503 (restart it) once it has failed for worker.hangLimitMs; a success ends both', async () => {
    const dev = controlledDevice();
    const broker = new MemoryBroker();
    const cfg = parseFleetConfig({ ...config, worker: { ...config.worker, hangLimitMs: 300 } });
    const worker = await runWorker(cfg, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(dev.device), createTransport: () => new MemoryTransport({ broker }) }, { log: createLogger({ level: 'silent' }) });
    started.push(worker);
    const producer = new MemoryProducer({ broker });
    const get = async (path: string): Promise<[number, unknown]> => {
      const res = await fetch(`http://127.0.0.1:${worker.metricsPort}${path}`);
      return [res.status, await res.json()];
    };
    const runOne = async (id: string, fail: boolean): Promise<void> => {
      const before = dev.executions.length;
      await producer.publish(request(id, 0));
      await until(() => dev.executions.length === before + 1, 2000, `${id} on the device`);
      if (fail) dev.executions[before]?.fail(new FleetError('DEVICE_ERROR', 'aclmdlExecute: device lost'));
      else dev.executions[before]?.release();
      await until(() => worker.worker.inflightBatches === 0, 2000, `${id} off the device`);
    };
    try {
      for (const id of ['a', 'b', 'c']) await runOne(id, true);
      const [readyStatus, ready] = await get('/readyz');
      expect(readyStatus).toBe(503);
      expect(JSON.stringify(ready)).toMatch(/device failing: the last 3 batches failed/);
      // Not for long yet: alive (a broker outage or one bad minute is not a restart).
      expect((await get('/healthz'))[0]).toBe(200);
      await new Promise((r) => setTimeout(r, 350));
      const [healthStatus, health] = await get('/healthz');
      expect(healthStatus).toBe(503);
      expect(JSON.stringify(health)).toMatch(/device failing for \d+ ms \(worker\.hangLimitMs 300\)/);
      await runOne('d', false);
      expect((await get('/healthz'))[0]).toBe(200);
      expect((await get('/readyz'))[0]).toBe(200);
    } finally {
      await producer.close();
    }
  });
});

describe('runWorker: a start that fails once the device is open', () => {
  it('unloads the models it loaded and closes the device (the broker refused the transport)', async () => {
    const dev = controlledDevice();
    let closed = 0;
    const device: DeviceLike = { ...dev.device, close: async () => void closed++ };
    const broker = new MemoryBroker();
    const refusing = new MemoryTransport({ broker });
    refusing.start = () => Promise.reject(new FleetError('TRANSPORT_ERROR', 'the brokers refused the consumer'));
    const attempt = runWorker(config, 0, { artifact: 'onnx', openDevice: () => Promise.resolve(device), createTransport: () => refusing }, { log: createLogger({ level: 'silent' }), metricsPort: 0 });
    await expect(attempt).rejects.toThrow('the brokers refused the consumer');
    expect(dev.loaded.size, 'models left loaded on the device').toBe(0);
    expect(closed).toBe(1);
  });
});
