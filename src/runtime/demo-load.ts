import type { ModelConfig } from '../contracts/model-config.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { DTYPE_BYTES, type Tensor } from '../contracts/tensor.ts';

/** Deterministic PRNG (mulberry32) so demo and bench loads are repeatable. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Inputs that fit a model config: random floats, token ids within a random bucketed length. */
export function syntheticInputs(config: ModelConfig, samples: number, rand: () => number): Tensor[] {
  const maxBound = config.buckets ? (config.buckets.bounds[config.buckets.bounds.length - 1] ?? 1) : 1;
  const length = config.buckets ? 1 + Math.floor(rand() * maxBound) : 1;
  return config.inputs.map((spec) => {
    const shape = spec.dims.map((d, axis) => {
      if (axis === 0) return samples;
      if (config.buckets?.input === spec.name && axis === config.buckets.axis) return length;
      return d < 0 ? 1 : d;
    });
    const n = shape.reduce((a, b) => a * b, 1);
    const data = new Uint8Array(n * DTYPE_BYTES[spec.dtype]);
    const view = new DataView(data.buffer);
    for (let i = 0; i < n; i++) {
      switch (spec.dtype) {
        case 'float32':
          view.setFloat32(i * 4, rand() * 2 - 1, true);
          break;
        case 'int64':
          view.setBigInt64(i * 8, BigInt(1 + Math.floor(rand() * 999)), true);
          break;
        case 'int32':
          view.setInt32(i * 4, 1 + Math.floor(rand() * 999), true);
          break;
        default:
          data[i * DTYPE_BYTES[spec.dtype]] = Math.floor(rand() * 256);
      }
    }
    return { name: spec.name, dtype: spec.dtype, shape, data };
  });
}

export interface SyntheticRequestOptions {
  readonly idPrefix: string;
  readonly replyTo?: string;
  /** Share of requests with a deadline, and its range (ms from now). */
  readonly deadlineShare?: number;
  readonly deadlineMs?: readonly [number, number];
  readonly maxSamples?: number;
}

export function syntheticRequest(config: ModelConfig, seq: number, rand: () => number, o: SyntheticRequestOptions): RequestEnvelope {
  const nowMs = Date.now();
  const samples = 1 + Math.floor(rand() * Math.min(o.maxSamples ?? 4, config.maxBatchSize));
  const req: RequestEnvelope = {
    id: `${o.idPrefix}-${seq}`,
    model: config.name,
    priority: Math.floor(rand() * config.priorityLevels),
    createdAt: nowMs,
    inputs: syntheticInputs(config, samples, rand),
  };
  if (o.replyTo) req.replyTo = o.replyTo;
  if (rand() < (o.deadlineShare ?? 0.5)) {
    const [lo, hi] = o.deadlineMs ?? [20, 500];
    req.deadlineAt = nowMs + lo + Math.floor(rand() * (hi - lo));
  }
  return req;
}

/**
 * Rolling one-second stats printed by `npm start`: throughput and p50/p99 of the requests served
 * (ok, in time or late), batch fill, and every outcome counted.
 */
export class DemoStats {
  private latencies: number[] = [];
  /**
   * Real rows and gear rows of the batches that served this interval's ok results. Every result of
   * a batch carries the batch's size and gear: a result of `s` of its `batchSize` rows stands for
   * s/batchSize of that batch's `gear` slots, so the sums come out per batch (as
   * npu_fleet_padded_items_total counts them), not as a per-request average that big batches inflate.
   */
  private realRows = 0;
  private gearRows = 0;
  private counts = { ok: 0, late: 0, expired: 0, rejected: 0, invalid: 0, failed: 0 };
  total = 0;

  add(r: ResultEnvelope): void {
    this.total++;
    if (r.status === 'ok' && r.late) this.counts.late++;
    else this.counts[r.status]++;
    // Throughput and latency are of what was served: an expired or rejected answer is counted on
    // its own, and a fleet past its capacity answering most requests expired is not serving them.
    if (r.status !== 'ok') return;
    this.latencies.push(r.timings.totalMs);
    if (r.gear > 0 && r.batchSize > 0) {
      const rows = r.outputs?.[0]?.shape[0] ?? 1;
      this.realRows += rows;
      this.gearRows += (rows * r.gear) / r.batchSize;
    }
  }

  /** One line for the last interval, then reset. */
  line(intervalMs: number): string {
    const sorted = [...this.latencies].sort((a, b) => a - b);
    const pct = (p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;
    const fill = this.gearRows > 0 ? this.realRows / this.gearRows : 0;
    const rps = (this.latencies.length * 1000) / intervalMs;
    const c = this.counts;
    const text =
      `throughput ${rps.toFixed(0)} req/s | p50 ${pct(0.5).toFixed(1)} ms | p99 ${pct(0.99).toFixed(1)} ms | ` +
      `batch fill ${(fill * 100).toFixed(0)}% | ok ${c.ok} late ${c.late} expired ${c.expired} rejected ${c.rejected} invalid ${c.invalid} failed ${c.failed}`;
    this.latencies = [];
    this.realRows = 0;
    this.gearRows = 0;
    this.counts = { ok: 0, late: 0, expired: 0, rejected: 0, invalid: 0, failed: 0 };
    return text;
  }
}
