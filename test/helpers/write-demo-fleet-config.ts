import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { tempDir } from './temp-dir.ts';

/**
 * The config file of an embedded memory fleet serving the example mlp-classifier on simulated
 * devices with the demo load on, as `npm start` runs it (metrics on free ports), in a fresh
 * directory under `prefix`. `worker` is laid over `{ metricsPort: 0 }`.
 */
export function writeDemoFleetConfig(
  prefix: string,
  fleet: { devices: number; requestsPerSecond: number; logLevel: 'info' | 'warn'; worker?: { hangLimitMs?: number } },
): string {
  const configFile = join(tempDir(prefix), 'fleet.yaml');
  writeFileSync(
    configFile,
    stringify({
      transport: { kind: 'memory' },
      devices: { count: fleet.devices, backend: 'sim' },
      models: ['mlp-classifier'],
      worker: { metricsPort: 0, ...fleet.worker },
      demo: { enabled: true, requestsPerSecond: fleet.requestsPerSecond },
      log: { level: fleet.logLevel },
    }),
  );
  return configFile;
}
