import { effectiveGears, type ModelConfig } from '../contracts/model-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { modelConfigMismatches, type ModelTensorSpec } from './model-io-check.ts';

/** The slice of src/device the runtime uses (structural, so the runtime never loads the addon). */
export interface ExecutableModel {
  readonly gears: readonly number[];
  /** Tensors as the model file declares them, in binding order (checked against config.yaml). */
  readonly inputs: readonly ModelTensorSpec[];
  readonly outputs: readonly ModelTensorSpec[];
  execute(
    inputs: Array<{ data: Uint8Array; dims: number[] }>,
    gear: number,
  ): Promise<{ outputs: Array<{ data: Uint8Array; dims: number[] }>; timings: { copyInMs: number; executeMs: number; copyOutMs: number } }>;
  unload(): Promise<void>;
}

export interface DeviceLike {
  readonly id: number;
  loadModel(path: string, opts?: { gears?: number[]; maxInputDims?: Record<string, number[]>; maxOutputDims?: Record<string, number[]> }): Promise<ExecutableModel>;
  /** Device memory as the device reports it; exported as npu_fleet_device_memory_used_bytes. */
  memInfo(): Promise<{ freeBytes: number; totalBytes: number }>;
  close(): Promise<void>;
}

/** Largest dims per input for range-dynamic (bucketed) inputs, so the binding sizes buffers once. */
function maxInputDims(config: ModelConfig): Record<string, number[]> | undefined {
  if (!config.buckets) return undefined;
  const out: Record<string, number[]> = {};
  const gears = effectiveGears(config);
  for (const input of config.inputs) {
    const dims = input.dims.map((d, axis) => {
      if (axis === 0) return gears[gears.length - 1] ?? config.maxBatchSize;
      if (config.buckets?.input === input.name && axis === config.buckets.axis) return config.buckets.bounds[config.buckets.bounds.length - 1] ?? d;
      return d;
    });
    out[input.name] = dims;
  }
  return out;
}

/**
 * A bucketed model's per-position outputs (one dynamic axis past the batch, the length; see
 * model-config) get buffers for the largest gear and bound; undefined when there are none.
 */
function maxOutputDims(config: ModelConfig): Record<string, number[]> | undefined {
  if (!config.buckets) return undefined;
  const gears = effectiveGears(config);
  const bound = config.buckets.bounds[config.buckets.bounds.length - 1] ?? 0;
  const out: Record<string, number[]> = {};
  for (const output of config.outputs) {
    if (!output.dims.some((d, axis) => axis > 0 && d === -1)) continue;
    out[output.name] = output.dims.map((d, axis) => (axis === 0 ? (gears[gears.length - 1] ?? config.maxBatchSize) : d === -1 ? bound : d));
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/**
 * Bounds from config.yaml's own dims for a model without buckets (every input axis past the batch
 * is fixed there): inputs at the largest gear, outputs with their one -1 (the batch) at it.
 */
function fixedConfigBounds(config: ModelConfig, gears: readonly number[]): { maxInputDims: Record<string, number[]>; maxOutputDims: Record<string, number[]> } {
  const maxGear = gears[gears.length - 1] ?? config.maxBatchSize;
  const maxInputDims: Record<string, number[]> = {};
  for (const input of config.inputs) maxInputDims[input.name] = input.dims.map((d, axis) => (axis === 0 || d < 0 ? maxGear : d));
  const maxOutputDims: Record<string, number[]> = {};
  for (const output of config.outputs) {
    if (output.dims.filter((d) => d === -1).length !== 1) continue;
    maxOutputDims[output.name] = output.dims.map((d) => (d === -1 ? maxGear : d));
  }
  return { maxInputDims, maxOutputDims };
}

/**
 * Loads a model version as a worker serves it (gears and buffer sizes from its config) and checks
 * the file's tensors against config.yaml; a mismatch unloads it again and fails like a bad file.
 */
export async function loadChecked(device: DeviceLike, path: string, config: ModelConfig, what: string): Promise<ExecutableModel> {
  const gears = effectiveGears(config);
  const outputs = maxOutputDims(config);
  let executable: ExecutableModel;
  try {
    executable = await device.loadModel(path, { gears, maxInputDims: maxInputDims(config), ...(outputs === undefined ? {} : { maxOutputDims: outputs }) });
  } catch (error) {
    // A model may keep dynamic a dimension config.yaml fixes (exported with a dynamic sequence
    // length, served at one): model-io-check accepts that, but the binding sizes such a tensor's
    // buffers only from bounds it is given. Without buckets no bounds were passed; load it again
    // bounded by the config's dims rather than fail with a loadModel option config.yaml cannot set.
    const bounds = config.buckets ? undefined : fixedConfigBounds(config, gears);
    if (bounds === undefined || !(error instanceof FleetError) || !/ has a dynamic non-batch dimension: pass max(Input|Output)Dims\./.test(error.message)) throw error;
    executable = await device.loadModel(path, { gears, ...bounds });
  }
  const problems = modelConfigMismatches(config, executable);
  // The scheduler pads batches to the config's gears, but a real .om accepts only the gears it was
  // compiled with (the loadModel option reaches the simulator alone): every batch padded to a gear
  // it lacks would fail on the device.
  const missing = gears.filter((g) => !executable.gears.includes(g));
  if (missing.length > 0) {
    problems.push(`batchGears [${gears.join(', ')}] include ${missing.join(', ')}, which the model does not accept (its gears: [${executable.gears.join(', ')}])`);
  } else {
    // Every input takes the batch on axis 0 (config.yaml's -1 there). An input whose axis 0 the
    // model fixes beside a dynamic one (a [1, 4] bias next to a [-1, 4] input) holds that many
    // rows at every gear: each batch padded to another gear would fail on the device.
    executable.inputs.forEach((t, i) => {
      const fixed = t.dims[0];
      if (fixed === undefined || fixed < 0) return;
      const other = gears.filter((g) => g !== fixed);
      if (other.length === 0) return;
      problems.push(
        `inputs[${i}] ${t.name}: the model fixes its batch axis 0 at ${fixed} (dims [${t.dims.join(', ')}]), but batches are padded to batchGears [${gears.join(', ')}], ` +
          `so every batch of ${other.join(', ')} items would fail: export the model with a dynamic axis 0 on every input, or set batchGears: [${fixed}]`,
      );
    });
  }
  if (problems.length > 0) {
    await executable.unload().catch(() => undefined);
    throw new FleetError('MODEL_LOAD_FAILED', `${what}: config.yaml does not match ${path}: ${problems.join('; ')}`, {
      details: { path, problems },
    });
  }
  return executable;
}
