// Load helpers shared by the e2e tests: publish synthetic requests and collect results by id.
import { loadModelConfig } from '../../src/contracts/config-loader.ts';
import type { ModelConfig } from '../../src/contracts/model-config.ts';
import type { RequestEnvelope } from '../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../src/contracts/result-envelope.ts';
import type { TransportSettings } from '../../src/contracts/fleet-config.ts';
import { createProducer } from '../../src/producer/index.ts';
import type { Producer, ReplySubscription } from '../../src/producer/producer.ts';
import { prng, syntheticRequest, type SyntheticRequestOptions } from '../../src/runtime/demo-load.ts';
import { uniqueName } from '../helpers/services.ts';

export class ResultCollector {
  readonly byId = new Map<string, ResultEnvelope[]>();
  received = 0;
  add(r: ResultEnvelope): void {
    this.received++;
    const list = this.byId.get(r.id) ?? [];
    list.push(r);
    this.byId.set(r.id, list);
  }
  get duplicates(): number {
    return this.received - this.byId.size;
  }
  first(id: string): ResultEnvelope | undefined {
    return this.byId.get(id)?.[0];
  }
  statuses(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const list of this.byId.values()) {
      const r = list[0];
      if (!r) continue;
      const key = r.status === 'ok' && r.late ? 'late' : r.status;
      out[key] = (out[key] ?? 0) + 1;
    }
    return out;
  }
}

export interface LoadSession {
  readonly producer: Producer;
  readonly replyTo: string;
  readonly results: ResultCollector;
  readonly config: ModelConfig;
  make(count: number, options?: Partial<SyntheticRequestOptions> & { priority?: number; seed?: number }): RequestEnvelope[];
  close(): Promise<void>;
}

export async function openLoad(transport: TransportSettings, model = 'mlp-classifier', repoDir = 'examples/models'): Promise<LoadSession> {
  const producer = createProducer(transport, {});
  const replyTo = uniqueName('replies');
  const results = new ResultCollector();
  const sub: ReplySubscription = await producer.subscribeReplies(replyTo, (r) => results.add(r));
  const config = loadModelConfig(`${repoDir}/${model}/config.yaml`);
  let seq = 0;
  return {
    producer,
    replyTo,
    results,
    config,
    make(count, options = {}) {
      const rand = prng(options.seed ?? 1 + seq);
      const out: RequestEnvelope[] = [];
      for (let i = 0; i < count; i++) {
        const r = syntheticRequest(config, seq++, rand, { idPrefix: options.idPrefix ?? replyTo, replyTo, deadlineShare: 0, maxSamples: 2, ...options });
        if (options.priority !== undefined) r.priority = options.priority;
        out.push(r);
      }
      return out;
    },
    async close() {
      await sub.close();
      await producer.close();
    },
  };
}

export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;
}
