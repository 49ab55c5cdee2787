import { existsSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

import type { Dtype } from '../contracts/tensor.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { dtypeFromAcl } from './acl-dtype.ts';
import type { RawDevice, RawModel, RawTensorInfo } from './native-addon.ts';
import { loadAddon } from './native-addon.ts';
import { toFleetError } from './native-error.ts';
import { validateExecuteInputs, validateLoadOptions } from './validate.ts';

export interface BackendInfo {
  /** 'sim' = the bundled libacl_sim.so, 'ascend' = a real libascendcl.so. */
  kind: 'sim' | 'ascend';
  libraryPath: string;
  deviceCount: number;
}

export interface TensorSpec {
  name: string;
  dtype: Dtype;
  /** -1 marks a dynamic dimension (the batch dimension of a dynamic-batch model). */
  dims: number[];
}

export interface LoadModelOptions {
  /** Batch gears from the model config. Real .om models report their own (aclmdlGetDynamicBatch). */
  gears?: number[];
  /** Upper bounds for inputs with dynamic non-batch dimensions (range-dynamic models). */
  maxInputDims?: Record<string, number[]>;
  /** Upper bounds for outputs with dynamic non-batch dimensions (sizes their buffers). */
  maxOutputDims?: Record<string, number[]>;
  /** Pipeline depth: 2 overlaps copy-in of the next batch with the current execution. */
  slots?: 1 | 2;
}

export interface ExecuteInput {
  /** Raw little-endian bytes; must not be modified until the promise settles. */
  data: Uint8Array;
  dims: number[];
}

export interface ExecuteResult {
  outputs: Array<{ data: Buffer; dims: number[] }>;
  timings: { copyInMs: number; executeMs: number; copyOutMs: number; totalMs: number };
  /** True when the execution took longer than `timeoutMs`; the outputs are still correct. */
  overran: boolean;
}

export interface ExecuteOptions {
  /** Marks the result `overran` past this many ms. Nothing is cancelled (ACL cannot). */
  timeoutMs?: number;
}

let backendCache: BackendInfo | undefined;
let exitHookInstalled = false;

/**
 * At process exit the addon stops open devices, waiting NPU_FLEET_EXIT_GRACE_MS (default 2000)
 * for work in flight; if a device is still busy (hung) it ends the process with _exit so the ACL
 * library is not torn down under running threads. This passes it the code the process exits with,
 * and (main thread) runs that teardown from the 'exit' event, before C exit() starts destroying
 * the ACL library's static singletons; the addon's atexit handler is then a no-op fallback.
 * Worker threads are torn down by the addon's env cleanup hooks instead: shutdownForExit stops
 * every device in the process. Runs on the JS thread; blocks only the exiting process.
 */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', (code) => {
    const addon = loadAddon();
    addon.setExitCode(typeof code === 'number' ? code : 0);
    if (isMainThread) addon.shutdownForExit();
  });
}

/** Which ACL library the binding drives (opens and initialises it on first call). */
export function backendInfo(): BackendInfo {
  if (backendCache) return backendCache;
  const addon = loadAddon();
  try {
    backendCache = addon.backendInfo();
  } catch (error) {
    throw toFleetError(error, 'backendInfo');
  }
  return backendCache;
}

/** Opens a device: a native thread that owns its ACL context and streams until close(). */
export async function openDevice(deviceId: number): Promise<Device> {
  const { deviceCount, kind } = backendInfo();
  if (!Number.isInteger(deviceId) || deviceId < 0 || deviceId >= deviceCount) {
    throw new FleetError(
      'INVALID_ARGUMENT',
      `unknown device ${String(deviceId)}: the ${kind} backend has ${deviceCount} device(s), ids 0..${deviceCount - 1}` +
        (kind === 'sim' ? ' (NPU_FLEET_SIM_DEVICES sets the simulated count)' : ''),
      { details: { deviceId, deviceCount } },
    );
  }
  installExitHook();
  try {
    return new Device(await loadAddon().openDevice(deviceId));
  } catch (error) {
    throw toFleetError(error, 'openDevice', { deviceId });
  }
}

export class Device {
  readonly id: number;
  #closed = false;

  /** @internal use openDevice() */
  constructor(private readonly raw: RawDevice) {
    this.id = raw.id;
  }

  get closed(): boolean {
    return this.#closed;
  }

  async loadModel(path: string, opts: LoadModelOptions = {}): Promise<LoadedModel> {
    this.#assertOpen('loadModel');
    const checked = validateLoadOptions(path, opts);
    if (!existsSync(path)) {
      throw new FleetError('MODEL_LOAD_FAILED', `model file not found: ${path}`, { details: { path, deviceId: this.id } });
    }
    let raw: RawModel;
    try {
      raw = await this.raw.loadModel(path, checked.gears, checked.maxInputDims, checked.slots, checked.maxOutputDims);
    } catch (error) {
      throw toFleetError(error, 'loadModel', { path, deviceId: this.id });
    }
    try {
      return new LoadedModel(raw, this, path, checked.maxInputDims, checked.maxOutputDims);
    } catch (error) {
      await raw.unload().catch(() => undefined);
      throw error;
    }
  }

  async memInfo(): Promise<{ freeBytes: number; totalBytes: number }> {
    this.#assertOpen('memInfo');
    try {
      return await this.raw.memInfo();
    } catch (error) {
      throw toFleetError(error, 'memInfo', { deviceId: this.id });
    }
  }

  /** Waits for every execution in flight, unloads the remaining models, releases the device. */
  async close(): Promise<void> {
    this.#assertOpen('close');
    this.#closed = true;
    try {
      await this.raw.close();
    } catch (error) {
      throw toFleetError(error, 'close', { deviceId: this.id });
    }
  }

  #assertOpen(op: string): void {
    if (this.#closed) throw new FleetError('CLOSED', `${op}: device ${this.id} is closed`, { details: { deviceId: this.id } });
  }
}

function toSpec(t: RawTensorInfo): TensorSpec {
  return { name: t.name, dtype: dtypeFromAcl(t.dtype, t.name), dims: [...t.dims] };
}

export class LoadedModel {
  readonly inputs: readonly TensorSpec[];
  readonly outputs: readonly TensorSpec[];
  readonly gears: readonly number[];
  readonly deviceMemoryBytes: number;
  readonly dynamic: 'batch' | 'range' | 'static';
  readonly slots: number;
  /** Per input: the dims its device buffers were sized for (largest gear / maxInputDims). */
  readonly maxInputDims: readonly (readonly number[])[];
  #unloaded = false;

  /** @internal created by Device.loadModel() */
  constructor(
    private readonly raw: RawModel,
    readonly device: Device,
    readonly path: string,
    maxInputDims: Record<string, number[]>,
    maxOutputDims: Record<string, number[]>,
  ) {
    const info = raw.info;
    this.inputs = Object.freeze(info.inputs.map(toSpec));
    this.outputs = Object.freeze(info.outputs.map(toSpec));
    this.gears = Object.freeze([...info.gears]);
    this.deviceMemoryBytes = info.deviceMemoryBytes;
    this.dynamic = info.dynamic;
    this.slots = info.slots;
    this.maxInputDims = Object.freeze(info.inputs.map((t) => Object.freeze([...t.maxDims])));
    for (const [option, names, tensors] of [
      ['maxInputDims', Object.keys(maxInputDims), info.inputs],
      ['maxOutputDims', Object.keys(maxOutputDims), info.outputs],
    ] as const) {
      const unknown = names.filter((name) => !tensors.some((t) => t.name === name));
      if (unknown.length > 0) {
        throw new FleetError('INVALID_ARGUMENT', `${option} names unknown tensor(s) ${unknown.join(', ')}; the model has: ${tensors.map((t) => t.name).join(', ')}`, {
          details: { path, unknown },
        });
      }
    }
  }

  /**
   * Runs one batch at `gear` (inputs already padded to it). Resolves when the device finished,
   * even past `timeoutMs` (then `overran: true`); buffers stay native-owned until then.
   */
  async execute(inputs: ExecuteInput[], gear: number, opts: ExecuteOptions = {}): Promise<ExecuteResult> {
    if (this.#unloaded) throw new FleetError('CLOSED', `execute: model ${this.path} is unloaded`, { details: { path: this.path } });
    if (this.device.closed) throw new FleetError('CLOSED', `execute: device ${this.device.id} is closed`, { details: { deviceId: this.device.id } });
    validateExecuteInputs(this, inputs, gear, opts.timeoutMs);
    try {
      return await this.raw.execute(inputs, gear, opts.timeoutMs ?? 0);
    } catch (error) {
      throw toFleetError(error, 'execute', { path: this.path, deviceId: this.device.id, gear });
    }
  }

  /** Waits for this model's executions in flight, then frees its device memory. */
  async unload(): Promise<void> {
    if (this.#unloaded) throw new FleetError('CLOSED', `unload: model ${this.path} is already unloaded`, { details: { path: this.path } });
    this.#unloaded = true;
    try {
      await this.raw.unload();
    } catch (error) {
      throw toFleetError(error, 'unload', { path: this.path, deviceId: this.device.id });
    }
  }
}
