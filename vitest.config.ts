import { defineConfig } from 'vitest/config';

// Two groups run one after the other: everything else in parallel, then the end-to-end fleet
// tests one file at a time. Those tests time real latencies (priority p99, drains) on a 2-core
// machine, so they must not share it with the parallel suites.
const shared = { testTimeout: 60_000, hookTimeout: 120_000, pool: 'forks' as const };

export default defineConfig({
  test: {
    globalSetup: ['test/helpers/global-setup.ts'],
    reporters: ['default'],
    projects: [
      {
        test: {
          ...shared,
          name: 'suite',
          include: ['test/**/*.test.ts'],
          exclude: ['test/e2e/**', '**/node_modules/**'],
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          ...shared,
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
