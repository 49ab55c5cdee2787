// The embedded fleet (`npm start`) when one device's worker cannot start: its /metrics port is in
// use. The workers started before it must not stay behind, serving and holding their devices.
import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { startEmbeddedFleet } from '../../../src/runtime/embedded-fleet.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

function listen(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '0.0.0.0', () => resolve(s));
  });
}

const portOf = (s: Server): number => (s.address() as { port: number }).port;

/** A port taken by this test, and a free one just below it (device 0's when device 1 gets the taken one). */
async function takenPortAboveAFreeOne(): Promise<{ free: number; taken: number }> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const taken = await listen(0);
    const free = portOf(taken) - 1;
    const probe = await listen(free).catch(() => undefined);
    if (probe !== undefined) {
      await new Promise((r) => probe.close(r));
      servers.push(taken);
      return { free, taken: portOf(taken) };
    }
    await new Promise((r) => taken.close(r));
  }
  throw new Error('no free port below an ephemeral one in 20 attempts');
}

describe('embedded fleet start-up failure', () => {
  it("device 1's metrics port in use: the start fails naming it, and device 0's worker is stopped, its port free again", async () => {
    const { free, taken } = await takenPortAboveAFreeOne();
    const config = parseFleetConfig({
      models: ['mlp-classifier'],
      devices: { count: 2, backend: 'sim' },
      worker: { metricsPort: free, drainTimeoutMs: 2_000 },
      demo: { enabled: false },
      log: { level: 'silent' },
    });
    await expect(startEmbeddedFleet(config, { artifact: 'onnx', openDevice }, createLogger({ level: 'silent' }), () => {})).rejects.toThrow(
      new RegExp(`cannot listen on 0\\.0\\.0\\.0:${taken}`),
    );
    // Before: device 0's worker kept serving on its port (EADDRINUSE here) with its device open.
    const again = await listen(free);
    servers.push(again);
    expect(portOf(again)).toBe(free);
  }, 60_000);
});
