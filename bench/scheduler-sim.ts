// Simulation bench for the scheduler (issue 4). Simulated clock, one device whose batch time is
// base + perItem × gear (± jitter); Poisson arrivals at several loads; mixed priorities and
// deadlines. The same arrival trace runs through: (a) no batching, (b) a fixed window / max batcher
// like Triton's dynamic batcher (FIFO, max_queue_delay, pad to the gear, no deadline awareness) with
// a 5 ms window and with Triton's default 0 ms, and (c) BatchScheduler.
// Run: npx tsx bench/scheduler-sim.ts [durationMs]
import { BatchScheduler } from '../src/scheduler/index.ts';
import type { SchedulerRequest } from '../src/scheduler/index.ts';
import { prng } from '../src/runtime/demo-load.ts';

const GEARS = [1, 2, 4, 8, 16, 32];
const DEVICE = { baseMs: 4, perItemMs: 0.25, jitter: 0.05 };
const CAPACITY_ITEMS_PER_MS = 32 / (DEVICE.baseMs + DEVICE.perItemMs * 32);
const DURATION_MS = Number(process.argv[2] ?? 20_000);
// priority: share, relative deadline (null = none)
interface TrafficClass {
  priority: number;
  share: number;
  deadlineMs: number | null;
}
const SCENARIOS: { name: string; classes: TrafficClass[] }[] = [
  {
    name: 'mixed priorities',
    classes: [
      { priority: 0, share: 0.2, deadlineMs: 30 },
      { priority: 1, share: 0.3, deadlineMs: 50 },
      { priority: 2, share: 0.25, deadlineMs: 150 },
      { priority: 2, share: 0.25, deadlineMs: null },
    ],
  },
  {
    // No priority help: what EDF, deadline-aware release and expiry alone buy.
    name: 'one priority, mixed deadlines',
    classes: [
      { priority: 1, share: 0.3, deadlineMs: 26 },
      { priority: 1, share: 0.4, deadlineMs: 45 },
      { priority: 1, share: 0.3, deadlineMs: 100 },
    ],
  },
];
const ITEMS = [
  { items: 1, share: 0.8 },
  { items: 2, share: 0.15 },
  { items: 4, share: 0.05 },
];
const MEAN_ITEMS = ITEMS.reduce((a, x) => a + x.items * x.share, 0);

const rng = prng;
const pick = <T extends { share: number }>(xs: readonly T[], u: number): T => {
  let acc = 0;
  for (const x of xs) if (u < (acc += x.share)) return x;
  return xs[xs.length - 1] as T;
};

type Req = SchedulerRequest<null>;

function trace(classes: TrafficClass[], load: number, seed: number): Req[] {
  const r = rng(seed);
  const ratePerMs = (load * CAPACITY_ITEMS_PER_MS) / MEAN_ITEMS;
  const out: Req[] = [];
  for (let t = -Math.log(1 - r()) / ratePerMs, i = 0; t < DURATION_MS; t += -Math.log(1 - r()) / ratePerMs, i++) {
    const c = pick(classes, r());
    out.push({ id: `r${i}`, priority: c.priority, items: pick(ITEMS, r()).items, arrivedAt: t, deadlineAt: c.deadlineMs === null ? undefined : t + c.deadlineMs, payload: null });
  }
  return out;
}

const gearFor = (n: number): number => GEARS.find((g) => g >= n) ?? n;

/** What a batching policy must answer; `next` is asked only when the device is free. */
interface Policy {
  enqueue(r: Req, nowMs: number): void;
  next(nowMs: number): { batch: Req[]; gear: number; expired: Req[] } | { wakeAt: number; expired: Req[] };
  completed(gear: number, deviceMs: number, nowMs: number): void;
}

/** FIFO: take up to maxItems queued items when the queue holds maxItems or the oldest waited delayMs. */
function fifoPolicy(maxItems: number, delayMs: number): Policy {
  const q: Req[] = [];
  let head = 0;
  let queuedItems = 0;
  return {
    enqueue(r) {
      q.push(r);
      queuedItems += r.items;
    },
    next(now) {
      if (head === q.length) return { wakeAt: Infinity, expired: [] };
      const oldest = q[head] as Req;
      if (queuedItems < maxItems && oldest.arrivedAt + delayMs > now) return { wakeAt: oldest.arrivedAt + delayMs, expired: [] };
      const batch: Req[] = [];
      let items = 0;
      while (head < q.length && items + (q[head] as Req).items <= maxItems) {
        const r = q[head++] as Req;
        batch.push(r);
        items += r.items;
      }
      if (batch.length === 0) batch.push(q[head++] as Req); // a request larger than maxItems goes alone
      for (const r of batch) queuedItems -= r.items;
      if (head > 4096) {
        q.splice(0, head);
        head = 0;
      }
      return { batch, gear: gearFor(items), expired: [] };
    },
    completed() {},
  };
}

function schedulerPolicy(): Policy & { s: BatchScheduler<null> } {
  const s = new BatchScheduler<null>({
    maxBatchSize: 32,
    gears: GEARS,
    priorityLevels: 3,
    maxQueueDelayMs: [0, 5, 20],
    agingMs: 1000,
    softLimitItems: 1_000_000,
    hardLimitItems: 2_000_000,
  });
  return {
    s,
    enqueue: (r) => void s.enqueue(r),
    next(now) {
      const d = s.decide(now);
      if (d.kind === 'dispatch') return { batch: [...d.batch.members], gear: d.batch.gear, expired: [...d.expired] };
      return { wakeAt: d.kind === 'wait' ? d.untilAt : Infinity, expired: [...d.expired] };
    },
    completed: (gear, deviceMs, now) => s.recordCompletion(gear, deviceMs, now),
  };
}

interface Result {
  completed: number;
  onTime: number;
  late: number;
  expired: number;
  withDeadline: number;
  latencies: Float64Array;
  p0Latencies: Float64Array;
  endMs: number;
  deviceMs: number;
  deviceOnExpiredMs: number;
  meanBatchItems: number;
}

function simulate(reqs: readonly Req[], policy: Policy, seed: number): Result {
  const jitter = rng(seed);
  const latencies: number[] = [];
  const p0: number[] = [];
  let completed = 0, onTime = 0, late = 0, expired = 0, deviceMs = 0, deviceOnExpiredMs = 0, batches = 0, batchItems = 0;
  const withDeadline = reqs.filter((r) => r.deadlineAt !== undefined).length;
  let next = 0;
  let busyUntil = 0;
  let inFlight: { batch: Req[]; gear: number; startAt: number } | null = null;
  let wakeAt = Infinity;
  let now = 0;
  let lastCompletionAt = 0;
  for (;;) {
    const arrival = next < reqs.length ? (reqs[next] as Req).arrivedAt : Infinity;
    now = Math.min(arrival, inFlight === null ? Infinity : busyUntil, wakeAt);
    if (now === Infinity) break;
    if (inFlight !== null && busyUntil <= now) {
      policy.completed(inFlight.gear, busyUntil - inFlight.startAt, busyUntil);
      for (const r of inFlight.batch) {
        completed++;
        const latency = busyUntil - r.arrivedAt;
        latencies.push(latency);
        if (r.priority === 0) p0.push(latency);
        if (r.deadlineAt === undefined || busyUntil <= r.deadlineAt) onTime++;
        else late++;
      }
      inFlight = null;
      lastCompletionAt = busyUntil;
    }
    while (next < reqs.length && (reqs[next] as Req).arrivedAt <= now) policy.enqueue(reqs[next++] as Req, now);
    wakeAt = Infinity;
    if (inFlight !== null) continue;
    const d = policy.next(now);
    expired += d.expired.length;
    if ('batch' in d) {
      const ms = (DEVICE.baseMs + DEVICE.perItemMs * d.gear) * (1 + DEVICE.jitter * (2 * jitter() - 1));
      for (const r of d.batch) if (r.deadlineAt !== undefined && r.deadlineAt <= now) deviceOnExpiredMs += (ms * r.items) / d.gear;
      inFlight = { batch: d.batch, gear: d.gear, startAt: now };
      busyUntil = now + ms;
      deviceMs += ms;
      batches++;
      batchItems += d.batch.reduce((a, r) => a + r.items, 0);
    } else {
      wakeAt = d.wakeAt;
    }
  }
  const sorted = (xs: number[]) => Float64Array.from(xs).sort();
  return { completed, onTime, late, expired, withDeadline, latencies: sorted(latencies), p0Latencies: sorted(p0), endMs: lastCompletionAt, deviceMs, deviceOnExpiredMs, meanBatchItems: batchItems / Math.max(1, batches) };
}

const pct = (xs: Float64Array, q: number): number => (xs.length === 0 ? NaN : (xs[Math.min(xs.length - 1, Math.floor(q * xs.length))] as number));
const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

console.log(`device: ${DEVICE.baseMs} + ${DEVICE.perItemMs} × gear ms (±${DEVICE.jitter * 100}%), gears ${GEARS.join(',')}; capacity ${f(CAPACITY_ITEMS_PER_MS * 1000, 0)} items/s at gear 32`);
console.log(`items per request 1/2/4 at 80/15/5 %; ${DURATION_MS / 1000} s of Poisson arrivals per run`);
console.log('throughput = completed req/s over the run (incl. late); goodput = on-time req/s; miss = (late + expired) / requests with a deadline');
console.log('');
const header = ['load', 'policy', 'req/s', 'good/s', 'p50 ms', 'p99 ms', 'p0 p99', 'miss %', 'late', 'expired', 'devOnExpired ms', 'items/batch'];
console.log(header.map((h, i) => (i < 2 ? h.padEnd(i === 0 ? 5 : 16) : h.padStart(i === 10 ? 16 : 9))).join(''));
const summary: string[] = [];
for (const scenario of SCENARIOS) {
console.log(`== ${scenario.name}: ${scenario.classes.map((c) => `p${c.priority} ${c.share * 100}% deadline ${c.deadlineMs ?? '-'} ms`).join(', ')}`);
summary.push(`== ${scenario.name}`);
for (const load of [0.5, 0.7, 0.9, 0.95]) {
  const reqs = trace(scenario.classes, load, 42 + Math.round(load * 100));
  const runs: [string, Policy][] = [
    ['no-batching', fifoPolicy(1, 0)],
    ['fixed 5ms/32', fifoPolicy(32, 5)],
    ['triton 0ms/32', fifoPolicy(32, 0)],
    ['BatchScheduler', schedulerPolicy()],
  ];
  const results = new Map<string, Result>();
  for (const [name, policy] of runs) {
    const r = simulate(reqs, policy, 7);
    results.set(name, r);
    const seconds = Math.max(r.endMs, DURATION_MS) / 1000;
    const row = [
      `${load * 100}%`.padEnd(5),
      name.padEnd(16),
      f(r.completed / seconds, 0).padStart(9),
      f(r.onTime / seconds, 0).padStart(9),
      f(pct(r.latencies, 0.5)).padStart(9),
      f(pct(r.latencies, 0.99)).padStart(9),
      f(pct(r.p0Latencies, 0.99)).padStart(9),
      f((100 * (r.late + r.expired)) / r.withDeadline, 2).padStart(9),
      String(r.late).padStart(9),
      String(r.expired).padStart(9),
      f(r.deviceOnExpiredMs, 1).padStart(16),
      f(r.meanBatchItems, 1).padStart(9),
    ];
    console.log(row.join(''));
  }
  const ours = results.get('BatchScheduler') as Result;
  const fixed = results.get('fixed 5ms/32') as Result;
  const triton = results.get('triton 0ms/32') as Result;
  const miss = (r: Result) => (r.late + r.expired) / r.withDeadline;
  const ratio = (a: number, b: number) => (b === 0 ? (a === 0 ? 'both 0' : `${a} vs 0`) : f(a / b, 3));
  const thr = (r: Result) => r.completed / (Math.max(r.endMs, DURATION_MS) / 1000);
  const good = (r: Result) => r.onTime / (Math.max(r.endMs, DURATION_MS) / 1000);
  summary.push(
    `${load * 100}%: miss ratio ours/fixed-5ms = ${ratio(miss(ours), miss(fixed))}, ours/triton-0ms = ${ratio(miss(ours), miss(triton))}; ` +
      `goodput ours/fixed = ${f(good(ours) / good(fixed), 3)}; throughput ours/fixed = ${f(thr(ours) / thr(fixed), 3)}; device ms on expired (ours) = ${f(ours.deviceOnExpiredMs, 1)}`,
  );
  console.log('');
}
}
console.log(summary.join('\n'));
