/**
 * 20,000 executions leave RSS and simulated device memory at their baseline: no per-call leak in
 * the binding (staging, output buffers, pinned references, events).
 */
import { describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { openDevice } from '../../src/device/index.ts';
import { affine, affineModel, asF32, f32Bytes, ramp } from './support/tiny-models.ts';

const EXECUTIONS = Number(process.env['NPU_FLEET_SOAK_EXECUTIONS'] ?? 20_000);
const IN_FLIGHT = 4;

function settle(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

describe('soak', () => {
  it(`runs ${EXECUTIONS} executions with RSS and device memory back at baseline`, { timeout: 300_000 }, async () => {
    const device = await openDevice(0);
    const baseline = await device.memInfo();
    const x = ramp(8 * 64);
    const data = f32Bytes(x);
    const expected = Array.from(affine(x));

    const run = async (count: number): Promise<void> => {
      const model = await device.loadModel(affineModel(64), { gears: [1, 8] });
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < count) {
          next++;
          const r = await model.execute([{ data, dims: [8, 64] }], 8);
          if (next % 997 === 0) expect(Array.from(asF32(r.outputs[0]!.data))).toEqual(expected);
        }
      };
      await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
      await model.unload();
    };

    // Warm up so allocator pools, JIT and V8 heap reach their steady size before measuring.
    await run(Math.min(2_000, EXECUTIONS / 10));
    settle();
    const rssBefore = process.memoryUsage().rss;
    await run(EXECUTIONS);
    settle();
    await new Promise((r) => setTimeout(r, 50));
    settle();
    const rssAfter = process.memoryUsage().rss;
    console.log(`soak: ${EXECUTIONS} executions, RSS ${(rssBefore / 2 ** 20).toFixed(1)} -> ${(rssAfter / 2 ** 20).toFixed(1)} MiB`);

    expect((await device.memInfo()).freeBytes).toBe(baseline.freeBytes);
    // 20,000 × (2 KiB output + bookkeeping) would be > 40 MiB if anything per call leaked. Under
    // AddressSanitizer freed memory sits in its quarantine, so RSS says nothing there; LeakSanitizer
    // (support/leak-check-setup.ts) checks the same thing precisely instead. ThreadSanitizer keeps
    // shadow memory and access history that grow with the run (support/run-tsan.sh).
    const sanitized = process.env['NPU_FLEET_ASAN'] === '1' || process.env['NPU_FLEET_TSAN'] === '1';
    if (!sanitized) expect(rssAfter - rssBefore).toBeLessThan(16 * 1024 * 1024);
    await device.close();
  });
});
