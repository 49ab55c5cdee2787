import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import type { FleetError } from '../errors/fleet-error.ts';

/**
 * Latencies in log buckets 1 % wide (0.01 ms to about 30 min in ~1,900 buckets): percentiles of a
 * run of any length in fixed memory, within 1 % of the exact value.
 */
export class LatencyHistogram {
  private static readonly BASE = Math.log(1.01);
  private static readonly MIN_MS = 0.01;
  private readonly counts = new Float64Array(1_900);
  count = 0;

  add(ms: number): void {
    const i = ms <= LatencyHistogram.MIN_MS ? 0 : Math.min(this.counts.length - 1, Math.ceil(Math.log(ms / LatencyHistogram.MIN_MS) / LatencyHistogram.BASE));
    this.counts[i] = (this.counts[i] ?? 0) + 1;
    this.count++;
  }

  /** The bucket bound holding the p-quantile (0 when empty). */
  percentile(p: number): number {
    if (this.count === 0) return 0;
    const rank = Math.max(1, Math.ceil(p * this.count));
    let seen = 0;
    for (let i = 0; i < this.counts.length; i++) {
      seen += this.counts[i] ?? 0;
      if (seen >= rank) return LatencyHistogram.MIN_MS * Math.exp(i * LatencyHistogram.BASE);
    }
    return LatencyHistogram.MIN_MS * Math.exp((this.counts.length - 1) * LatencyHistogram.BASE);
  }
}

/** What a reply (or its absence) counts as: a status, ok split into in time and late, rejected by its code. */
export function outcomeOf(result: ResultEnvelope): string {
  if (result.status === 'ok') return result.late === true ? 'late' : 'ok';
  if (result.status === 'rejected' && result.error?.code === 'SUPERSEDED') return 'superseded';
  return result.status;
}

/** An outcome the fleet gave (any status), not a request's missing reply or failed send. */
const isAnswer = (outcome: string): boolean => outcome !== 'no reply' && !outcome.startsWith('error ');

/** The counts and latencies of a load or frames run: per interval (the progress line) and overall. */
export class RunStats {
  readonly total = new Map<string, number>();
  readonly overall = new LatencyHistogram();
  private interval = new LatencyHistogram();
  private intervalCounts = new Map<string, number>();
  /**
   * Real rows and gear rows of the batches that served this interval's ok results: a result of
   * `s` of its batch's `batchSize` rows stands for s/batchSize of that batch's `gear` rows, so the
   * sums come out per batch (as npu_fleet_padded_items_total counts them), not a per-result
   * average that big batches inflate.
   */
  private intervalRealRows = 0;
  private intervalGearRows = 0;
  private intervalHeldBack = 0;

  result(result: ResultEnvelope): string {
    const outcome = outcomeOf(result);
    this.count(outcome);
    // Latency of what was served: an expired or superseded answer comes fast and says nothing of it.
    if (result.status === 'ok') {
      this.overall.add(result.timings.totalMs);
      this.interval.add(result.timings.totalMs);
      if (result.gear > 0 && result.batchSize > 0) {
        const rows = result.outputs?.[0]?.shape[0] ?? 1;
        this.intervalRealRows += rows;
        this.intervalGearRows += (rows * result.gear) / result.batchSize;
      }
    }
    return outcome;
  }

  noReply(error: FleetError): string {
    // CLOSED: the run stopped waiting for it (a second Ctrl-C), which is a missing reply too.
    const outcome = error.code === 'TIMEOUT' || error.code === 'CLOSED' ? 'no reply' : `error ${error.code}`;
    this.count(outcome);
    return outcome;
  }

  /** Due requests not sent this interval (over --max-outstanding): the line shows them beside the rate sent. */
  heldBack(count: number): void {
    this.intervalHeldBack += count;
  }

  /** The interval so far has something to show besides sends: a reply, a missing one, a held-back request. */
  intervalHasOutcomes(): boolean {
    return this.intervalCounts.size > 0 || this.intervalHeldBack > 0;
  }

  private count(outcome: string): void {
    this.total.set(outcome, (this.total.get(outcome) ?? 0) + 1);
    this.intervalCounts.set(outcome, (this.intervalCounts.get(outcome) ?? 0) + 1);
  }

  /** One progress line for the interval just ended, then a new interval. */
  line(intervalMs: number, sent: number): string {
    let answered = 0;
    for (const [outcome, count] of this.intervalCounts) if (isAnswer(outcome)) answered += count;
    const fill = this.intervalGearRows > 0 ? this.intervalRealRows / this.intervalGearRows : 0;
    // Counts over the interval, as the outcome counts at the end of the line are, so answered adds
    // up to them: rates rescaled to a second stood beside raw counts (the last, part-second line:
    // "answered 5/s" beside "ok 1 expired 1"). A tick a little off a second is a second's line.
    const per = Math.abs(intervalMs - 1000) <= 50 ? '/s' : intervalMs < 100 ? ` in ${Math.round(intervalMs)} ms` : ` in ${(intervalMs / 1000).toFixed(1)} s`;
    const held = this.intervalHeldBack > 0 ? `, held back ${this.intervalHeldBack}${per}` : '';
    const text =
      `sent ${sent}${per}${held} | answered ${answered}${per} | ` +
      `ok ${this.interval.count === 0 ? 'p50 - p99 -' : `p50 ${this.interval.percentile(0.5).toFixed(1)} ms p99 ${this.interval.percentile(0.99).toFixed(1)} ms`} | ` +
      `batch fill ${(fill * 100).toFixed(0)}% | ${counts(this.intervalCounts)}`;
    this.interval = new LatencyHistogram();
    this.intervalCounts = new Map();
    this.intervalRealRows = 0;
    this.intervalGearRows = 0;
    this.intervalHeldBack = 0;
    return text;
  }

  /** Requests the fleet answered (any status), as opposed to those with no reply or a send error. */
  replies(): number {
    let n = 0;
    for (const [outcome, count] of this.total) if (isAnswer(outcome)) n += count;
    return n;
  }

  summary(): string {
    const h = this.overall;
    // Nothing ok: a latency of 0.0 ms would read as answers that came at once.
    if (h.count === 0) return `${counts(this.total)} | ok latency -: nothing ok`;
    return `${counts(this.total)} | ok latency p50 ${h.percentile(0.5).toFixed(1)} ms, p95 ${h.percentile(0.95).toFixed(1)} ms, p99 ${h.percentile(0.99).toFixed(1)} ms, max ${h.percentile(1).toFixed(1)} ms`;
  }
}

const ORDER = ['ok', 'late', 'expired', 'superseded', 'rejected', 'invalid', 'failed', 'no reply'];

function counts(m: ReadonlyMap<string, number>): string {
  const keys = [...m.keys()].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  return keys.length === 0 ? 'no replies' : keys.map((k) => `${k} ${m.get(k)}`).join(' ');
}

const rank = (k: string): number => {
  const i = ORDER.indexOf(k);
  return i === -1 ? ORDER.length : i;
};
