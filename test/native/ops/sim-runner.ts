/**
 * The simulator side of the differential tests: runs a model through src/device (the binding and
 * libacl_sim.so), with the same host tensors the onnxruntime side gets.
 */
import { openDevice } from '../../../src/device/index.ts';
import type { HostTensor, OutputTensor } from './differential.ts';

export interface LoadedSimModel {
  run(inputs: HostTensor[], gear: number): Promise<OutputTensor[]>;
  unload(): Promise<void>;
}

export interface SimDeviceHandle {
  load(path: string, gears: number[], maxInputDims: Record<string, number[]>): Promise<LoadedSimModel>;
  close(): Promise<void>;
}

export async function openSimDevice(id = 0): Promise<SimDeviceHandle> {
  const device = await openDevice(id);
  return {
    async load(path, gears, maxInputDims) {
      const model = await device.loadModel(path, { gears, maxInputDims });
      return {
        async run(inputs, gear) {
          const r = await model.execute(
            inputs.map((t) => ({ data: new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), dims: t.dims })),
            gear,
          );
          return r.outputs.map((o) => {
            // Copy: the binding's buffer need not be 4-byte aligned.
            const bytes = new Uint8Array(o.data.byteLength);
            bytes.set(o.data);
            return { dims: [...o.dims], data: new Float32Array(bytes.buffer) };
          });
        },
        unload: () => model.unload(),
      };
    },
    close: () => device.close(),
  };
}
