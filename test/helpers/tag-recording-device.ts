import { openDevice } from '../../src/device/index.ts';
import type { DeviceLike } from '../../src/runtime/load-checked.ts';
import { withExecute } from './wrapped-device.ts';

/**
 * The real simulated device `deviceId`, handing `onExecution` the tags of the rows each execution
 * carries: a test's requests put a tag (≥ 1) in their first feature, one row of `features` floats
 * each; gear padding rows are zero and left out.
 */
export async function tagRecordingDevice(deviceId: number, features: number, onExecution: (tags: number[]) => void): Promise<DeviceLike> {
  return withExecute(await openDevice(deviceId), (model) => (inputs, gear) => {
    const first = inputs[0] as { data: Uint8Array };
    const rows = new Float32Array(first.data.buffer, first.data.byteOffset, first.data.byteLength / 4);
    const tags: number[] = [];
    for (let r = 0; r < gear; r++) if (rows[r * features] !== 0) tags.push(rows[r * features] as number);
    onExecution(tags);
    return model.execute(inputs, gear);
  });
}
