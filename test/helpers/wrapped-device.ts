import type { DeviceLike, ExecutableModel } from '../../src/runtime/load-checked.ts';

/**
 * The real (simulated) device, with every model it loads executing through `wrap`: tests that
 * slow a device down or record what each batch carried.
 */
export function withExecute(inner: DeviceLike, wrap: (model: ExecutableModel) => ExecutableModel['execute']): DeviceLike {
  return {
    id: inner.id,
    memInfo: () => inner.memInfo(),
    close: () => inner.close(),
    async loadModel(path, opts): Promise<ExecutableModel> {
      const model = await inner.loadModel(path, opts);
      return { gears: model.gears, inputs: model.inputs, outputs: model.outputs, unload: () => model.unload(), execute: wrap(model) };
    },
  };
}
