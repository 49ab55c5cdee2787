/**
 * Config for running only the native tests (no Kafka/Redis global setup): `npm run test:asan` and
 * quick local runs: `npx vitest run --config test/native/vitest.config.ts`.
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    root: fileURLToPath(new URL('../..', import.meta.url)),
    include: ['test/native/**/*.test.ts'],
    setupFiles: ['test/native/support/leak-check-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: 'forks',
    reporters: ['default'],
  },
});
