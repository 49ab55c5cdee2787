/**
 * Child process for exit-order.test.ts: opens a device, loads a model, runs it once and never
 * closes it, then exits (argv[2] = 'exit': process.exit(0); 'drain': the event loop runs dry).
 * A process 'exit' listener registered after the device was opened prints how many device threads
 * are still running at that point, i.e. before C exit() runs atexit handlers and the ACL
 * library's static destructors.
 */
import { openDevice } from '../../../../src/device/index.ts';
import { loadAddon } from '../../../../src/device/native-addon.ts';
import { affineModel, f32Bytes, ramp } from '../../../native/support/tiny-models.ts';

const device = await openDevice(0);
const model = await device.loadModel(affineModel(4), { gears: [1] });
await model.execute([{ data: f32Bytes(ramp(4)), dims: [1, 4] }], 1);
process.on('exit', () => {
  process.stdout.write(`live at exit: ${loadAddon().liveDevices()}\n`);
});
if (process.argv[2] === 'exit') process.exit(0);
