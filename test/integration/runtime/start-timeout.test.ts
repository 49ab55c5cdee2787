import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { hungModelRepo } from '../../helpers/hung-model-repo.ts';
import { freePort } from '../../helpers/service-process.ts';
import { until } from '../../helpers/until.ts';

describe('a worker start-up that hangs (model load blocked on the real simulator)', () => {
  it('past worker.startTimeoutMs: logged with the file it waits for, onStartTimeout called, /healthz 503 naming it (200 before)', async () => {
    process.env.NPU_FLEET_DEVICE = 'sim';
    const { repo, fifo, release } = hungModelRepo();
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger({ level: 'info', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const config = parseFleetConfig({ modelRepository: repo, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { startTimeoutMs: 1_500 } });
    const port = await freePort();
    let timeouts = 0;
    const starting = runWorker(config, 0, { artifact: 'onnx', openDevice, createTransport: () => new MemoryTransport({ broker: new MemoryBroker() }) }, { log, metricsPort: port, onStartTimeout: () => timeouts++ });
    const outcome = starting.then(
      () => 'started',
      (err: unknown) => err as Error,
    );
    try {
      await until(() => lines.some((l) => l.msg === 'serving /metrics, /healthz, /readyz'), 20_000, 'the health server');
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 'healthy while within the bound').toBe(200);
      await until(() => timeouts > 0, 10_000, 'onStartTimeout');
      const fatal = lines.find((l) => l.level === 60);
      expect(fatal?.msg).toMatch(/start-up did not finish within worker\.startTimeoutMs/);
      expect(String(fatal?.waitingFor)).toContain(`loading ${fifo}`);
      const res = await fetch(`http://127.0.0.1:${port}/healthz`);
      const body = await res.text();
      expect(res.status, body).toBe(503);
      expect(body).toContain('worker.startTimeoutMs 1500');
      expect(body).toContain(fifo);
      expect(timeouts).toBe(1);
    } finally {
      release();
      // The load fails once it can read the FIFO: the start fails and closes its server.
      const result = await outcome;
      expect(result).toBeInstanceOf(Error);
    }
  }, 60_000);
});
