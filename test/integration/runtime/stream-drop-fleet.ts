import { appendFileSync, cpSync } from 'node:fs';
import { join } from 'node:path';
import type { z } from 'zod';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { FleetConfig, TransportSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import type { Producer } from '../../../src/producer/producer.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/**
 * The latest-frame-wins tests' fleet: one simulated device serving mlp-classifier with
 * `streams: { superseded: drop }` over `transport`, from a repository of its own.
 */
export function streamDropConfig(transport: z.input<typeof TransportSettingsSchema>, prefix: string): FleetConfig {
  const repo = tempDir(prefix);
  cpSync('examples/models/mlp-classifier', join(repo, 'mlp-classifier'), { recursive: true });
  appendFileSync(join(repo, 'mlp-classifier', 'config.yaml'), 'streams: { superseded: drop }\n');
  return parseFleetConfig({ transport, devices: { count: 1, backend: 'sim' }, modelRepository: repo, models: ['mlp-classifier'], worker: { metricsPort: 0 }, log: { level: 'warn' } });
}

/**
 * Every result sent to `replyTo`: by request id (all of them: a frame answered twice shows as two)
 * and in arrival order. The subscription's close goes into `cleanup`.
 */
export async function collectReplies(producer: Producer, replyTo: string, cleanup: Array<() => Promise<unknown> | void>) {
  const results = new Map<string, ResultEnvelope[]>();
  const arrival: ResultEnvelope[] = [];
  const sub = await producer.subscribeReplies(replyTo, (r: ResultEnvelope) => {
    results.set(r.id, [...(results.get(r.id) ?? []), r]);
    arrival.push(r);
  });
  cleanup.push(() => sub.close());
  return { results, arrival };
}
