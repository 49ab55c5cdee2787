/**
 * Config for `sh test/native/support/run-tsan.sh`: the native tests and the device integration
 * tests (no Kafka/Redis), under the ThreadSanitizer build, without the onnxruntime oracle tests.
 * Longer timeouts: TSan slows the addon's and the simulator's code several times.
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    root: fileURLToPath(new URL('../../..', import.meta.url)),
    include: ['test/native/**/*.test.ts', 'test/integration/device/**/*.test.ts'],
    // The onnxruntime-node oracle runs its own thread pool in the test process; TSan cannot see
    // its locking (uninstrumented) and now and then reports a condition-variable wait inside it
    // as an unlock of an unlocked mutex, with no onnxruntime frame left to suppress it by. These
    // files check numbers against onnxruntime, not threading, and `npm test` runs them.
    exclude: [
      'test/native/ops/differential.test.ts',
      'test/native/ops/ops-differential.test.ts',
      'test/native/ops/op-cases-ort.test.ts',
      'test/native/models/example-models-ort.test.ts',
      'test/native/models/example-models-differential.test.ts',
    ],
    testTimeout: 300_000,
    hookTimeout: 300_000,
    pool: 'forks',
    // Into the workers (and the children they spawn), not the vitest main process.
    env: { LD_PRELOAD: process.env['NPU_FLEET_TSAN_PRELOAD'] ?? '' },
    reporters: ['default'],
  },
});
