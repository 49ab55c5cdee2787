// The built-in demo load of the embedded fleet (`npm start`) on a busy event loop: the workers run
// in the same process, so its ticks run late; the demo must still send at its rate.
import { afterEach, describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { openDevice } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { startEmbeddedFleet, type EmbeddedFleet } from '../../../src/runtime/embedded-fleet.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';

let fleet: EmbeddedFleet | undefined;
afterEach(async () => {
  await fleet?.stop();
  fleet = undefined;
});

describe('embedded fleet demo load', () => {
  it('sends demo.requestsPerSecond while the event loop is busy, not one tick share per late tick', async () => {
    const rate = 500;
    const config = parseFleetConfig({
      models: ['mlp-classifier'],
      devices: { count: 1, backend: 'sim' },
      worker: { metricsPort: 0 },
      demo: { enabled: true, requestsPerSecond: rate },
      log: { level: 'silent' },
    });
    fleet = await startEmbeddedFleet(config, { artifact: 'onnx', openDevice }, createLogger({ level: 'silent' }), () => {});
    let sent = 0;
    const broker = fleet.broker;
    const send = broker.send.bind(broker);
    broker.send = (queue, messages) => {
      if (queue.endsWith('.requests')) sent += messages.length;
      send(queue, messages);
    };
    const startedAt = Date.now();
    // 15 ms of every 20 ms busy, as a loaded machine (or a heavy batch's result handling) does.
    const busy = setInterval(() => {
      const until = Date.now() + 15;
      while (Date.now() < until) {
        // busy
      }
    }, 20);
    await new Promise((r) => setTimeout(r, 2_000));
    clearInterval(busy);
    const perSecond = (sent * 1000) / (Date.now() - startedAt);
    // Before: about one 20 ms share per tick that ran, 250-300 req/s here.
    expect(perSecond).toBeGreaterThan(rate * 0.85);
    expect(perSecond).toBeLessThan(rate * 1.1);
  }, 60_000);
});
