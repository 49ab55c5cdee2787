import { defineConfig } from 'vitest/config';

// Three groups run one after the other. First, the integration files that time real latencies (a
// priority p99, a load run against a 2 s deadline, a signal a few hundred ms after spawn), one at a
// time, on a broker that has not yet taken the whole suite's topics and groups (run after them in a
// CI run, the load run's Kafka case answered ok at p50 1986 ms and failed; alone it passes). Then
// most files two at a time:
// they spend most of their time waiting on brokers, child processes and timers, so a 2-core machine
// runs two of them in about the time of one. Last, the end-to-end fleet tests one file at a time:
// they time real latencies (priority p99, drains) and must not share the machine.
const shared = { testTimeout: 60_000, hookTimeout: 120_000, pool: 'forks' as const };

/** Suite files whose assertions time real latencies: run alone, before the parallel group. */
const TIMED = [
  'test/integration/transport/kafka-transport.test.ts',
  'test/integration/cli/load-command.test.ts',
  'test/integration/cli/start-up-signals.test.ts',
  'test/native/event-loop.test.ts',
];

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
          exclude: ['test/e2e/**', '**/node_modules/**', ...TIMED],
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
      },
      {
        test: {
          ...shared,
          name: 'timed',
          include: TIMED,
          fileParallelism: false,
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          ...shared,
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          fileParallelism: false,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
