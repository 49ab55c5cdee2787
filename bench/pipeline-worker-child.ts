/**
 * One device worker in its own process, as `npu-fleet start` runs them, for the pipeline bench.
 * The worker is the production runWorker(); the parent only adds pause/resume over IPC so every
 * run can start from a pre-published backlog, like the echo it is compared with.
 * Messages in: { cmd: 'pause' | 'resume' | 'stop' }. Messages out: { ok: cmd }.
 */
import { parseFleetConfig } from '../src/contracts/config-loader.ts';
import { openDevice } from '../src/device/index.ts';
import { createLogger } from '../src/observability/logger.ts';
import { runWorker } from '../src/runtime/worker-process.ts';
import { transportFor } from '../src/cli/worker-deps.ts';
import type { Transport } from '../src/transport/index.ts';

const [configJson, deviceArg, model] = process.argv.slice(2);
if (configJson === undefined || deviceArg === undefined || model === undefined || process.send === undefined) {
  throw new Error('pipeline-worker-child: run by bench/pipeline-transport-bench.ts (fork with IPC)');
}
const send = (m: unknown): void => void process.send?.(m);
const config = parseFleetConfig(JSON.parse(configJson));
const log = createLogger({ level: 'warn' });
let transport: Transport | undefined;
const running = await runWorker(
  config,
  Number(deviceArg),
  {
    artifact: 'onnx',
    openDevice,
    createTransport: (c, l) => (transport = transportFor(c, l)),
  },
  { log, metricsPort: 0 },
);
process.on('message', (m: { cmd: string }) => {
  void (async () => {
    if (m.cmd === 'pause') transport?.pause(model, [0, 1, 2]);
    else if (m.cmd === 'resume') transport?.resume(model, [0, 1, 2]);
    else if (m.cmd === 'stop') {
      const code = await running.stop();
      send({ ok: 'stop', code });
      process.exit(code);
    }
    send({ ok: m.cmd });
  })();
});
send({ ok: 'ready' });
