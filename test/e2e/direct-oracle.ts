// Computes what the binding returns for a request when called directly (no fleet), to compare
// against results that went through brokers, scheduler, batching and padding.
import { openDevice } from '../../src/device/index.ts';
import { effectiveGears, type ModelConfig } from '../../src/contracts/model-config.ts';
import type { RequestEnvelope } from '../../src/contracts/request-envelope.ts';
import { loadModelConfig } from '../../src/contracts/config-loader.ts';
import { gatherInputs, scatterOutputs } from '../../src/runtime/batch-io.ts';

export async function directOutputs(
  modelDir: string,
  requests: readonly RequestEnvelope[],
  deviceId = 0,
): Promise<Map<string, Float32Array[]>> {
  const config: ModelConfig = loadModelConfig(`${modelDir}/config.yaml`);
  const gears = effectiveGears(config);
  const device = await openDevice(deviceId);
  const model = await device.loadModel(`${modelDir}/1/model.onnx`, { gears });
  const out = new Map<string, Float32Array[]>();
  try {
    for (const r of requests) {
      const items = r.inputs[0]?.shape[0] ?? 1;
      const gear = gears.find((g) => g >= items) ?? items;
      const inputs = gatherInputs([r], config, { gear, boundLength: null });
      const { outputs } = await model.execute(inputs, gear);
      const [mine] = scatterOutputs(outputs, config, { gear, members: [{ items } as never] });
      out.set(r.id, (mine ?? []).map((t) => new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength))));
    }
  } finally {
    await model.unload();
    await device.close();
  }
  return out;
}

export function maxRelDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) return Infinity;
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    worst = Math.max(worst, Math.abs(x - y) / Math.max(Math.abs(y), 1e-6));
  }
  return worst;
}
