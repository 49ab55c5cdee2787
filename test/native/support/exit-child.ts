/**
 * Child process for process-exit.test.ts. Modes:
 *  idle-open      open a device, load a model, run once, never close: must exit by itself;
 *  exit-inflight  start an execution (the test makes the simulator hang it), then
 *                 process.exit(argv[3] ?? 0) 50 ms later: teardown closes the device, waiting
 *                 for the work up to NPU_FLEET_EXIT_GRACE_MS, and exits with that code;
 *  run-value      execute an input whose first element is argv[3] (for crash@value=V).
 */
import { openDevice } from '../../../src/device/index.ts';
import { affineModel, f32Bytes, ramp } from './tiny-models.ts';

const mode = process.argv[2];
const device = await openDevice(0);
const model = await device.loadModel(affineModel(4), { gears: [1] });
const input = [{ data: f32Bytes(ramp(4)), dims: [1, 4] }];
if (mode === 'idle-open') {
  await model.execute(input, 1);
  process.stdout.write('ran\n');
} else if (mode === 'run-value') {
  const poisoned = ramp(4);
  poisoned[0] = Number(process.argv[3]);
  await model.execute([{ data: f32Bytes(poisoned), dims: [1, 4] }], 1);
  process.stdout.write('ran\n');
} else if (mode === 'exit-inflight') {
  void model.execute(input, 1);
  setTimeout(() => {
    process.stdout.write(`exiting ${Date.now()}\n`);
    process.exit(Number(process.argv[3] ?? 0));
  }, 50);
}
