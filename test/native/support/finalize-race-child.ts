/**
 * Child process for finalize-race.test.ts. A worker thread loads the addon (backendInfo, no
 * device) and ends; its env teardown may aclFinalize the process-wide ACL, since no device is
 * open. NPU_FLEET_TEST_FINALIZE_DELAY_MS holds that teardown just before it decides, so the main
 * thread can open device 0 and run on it meanwhile, as another thread of an embedding process
 * may at any moment. The decision must see that device: the main thread runs on it again after
 * the worker is gone, then closes it.
 * Prints: 'worker exited <code>', 'before: right|WRONG', 'after: right|WRONG', 'closed'.
 */
import { isMainThread, parentPort, Worker } from 'node:worker_threads';
import { backendInfo, openDevice } from '../../../src/device/index.ts';
import { affine, affineModel, asF32, f32Bytes, ramp } from './tiny-models.ts';

if (isMainThread) {
  backendInfo();
  const self = JSON.stringify(import.meta.url);
  const worker = new Worker(`import('tsx/esm/api').then((t) => { t.register(); return import(${self}); })`, { eval: true });
  const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
  await new Promise<void>((resolve) => worker.once('message', () => resolve()));
  // The worker is in its env teardown now, held before it decides whether to finalize.
  await new Promise((r) => setTimeout(r, 100));
  const device = await openDevice(0);
  const model = await device.loadModel(affineModel(4), { gears: [1] });
  const run = async (): Promise<string> => {
    try {
      const r = await model.execute([{ data: f32Bytes(ramp(4)), dims: [1, 4] }], 1);
      return Array.from(asF32(r.outputs[0]!.data)).join() === Array.from(affine(ramp(4))).join() ? 'right' : 'WRONG';
    } catch (err) {
      return `failed: ${(err as Error).message}`;
    }
  };
  process.stdout.write(`before: ${await run()}\n`);
  process.stdout.write(`worker exited ${await exited}\n`);
  process.stdout.write(`after: ${await run()}\n`);
  await device.close();
  process.stdout.write('closed\n');
} else {
  backendInfo();
  parentPort?.postMessage('exiting');
  process.exit(0);
}
