/**
 * Child process for worker-exit.test.ts. A worker thread opens device 0 and queues three
 * executions of 256 KiB inputs on a two-slot model; the simulator hangs the first (the test sets
 * hang@1:<ms>), the second waits behind it on the other slot and the third waits for a free
 * slot. The worker then ends its thread with process.exit() 50 ms later. The worker's env
 * teardown closes the device through the addon's env cleanup hook, which gives up after
 * NPU_FLEET_EXIT_GRACE_MS and leaves the device thread running; the env's heap, the JS input
 * buffers of the queued executions included, is freed with it. The main thread stays alive past
 * the end of the hang, so the device thread finishes its work after the worker's env (and its
 * ThreadSafeFunction) is gone; then it opens device 1 on the main thread and runs on it, and
 * exits by draining its event loop.
 * Prints: 'worker exited <code>', 'main ran correctly'.
 */
import { isMainThread, Worker } from 'node:worker_threads';
import { openDevice } from '../../../src/device/index.ts';
import { affine, affineModel, asF32, f32Bytes, ramp } from './tiny-models.ts';

const hangMs = Number(process.env['WORKER_EXIT_HANG_MS'] ?? 1500);
// Large enough that the allocator gives each input its own mapping, unmapped when freed.
const WIDTH = 65_536;

if (isMainThread) {
  // tsx's loader hooks are per thread: the worker registers them before importing this file.
  const self = JSON.stringify(import.meta.url);
  const worker = new Worker(`import('tsx/esm/api').then((t) => { t.register(); return import(${self}); })`, { eval: true });
  const code = await new Promise<number>((resolve) => worker.once('exit', resolve));
  process.stdout.write(`worker exited ${code}\n`);
  await new Promise((r) => setTimeout(r, hangMs + 500));
  const device = await openDevice(1);
  const model = await device.loadModel(affineModel(4), { gears: [1] });
  const r = await model.execute([{ data: f32Bytes(ramp(4)), dims: [1, 4] }], 1);
  const right = Array.from(asF32(r.outputs[0]!.data)).join() === Array.from(affine(ramp(4))).join();
  process.stdout.write(`main ran ${right ? 'correctly' : 'WRONG'}\n`);
  await device.close();
} else {
  const device = await openDevice(0);
  const model = await device.loadModel(affineModel(WIDTH), { gears: [1] });
  for (let i = 0; i < 3; ++i) {
    void model.execute([{ data: f32Bytes(ramp(WIDTH, i)), dims: [1, WIDTH] }], 1).catch(() => undefined);
  }
  setTimeout(() => process.exit(3), 50);
}
