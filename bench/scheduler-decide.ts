// Cost of BatchScheduler.decide() with 10,000 requests queued (issue 4 target: <= 5 µs per
// dispatched request). Every dispatched request is replaced by a fresh one, so the queue stays at
// 10,000 while time advances. Run: npx tsx bench/scheduler-decide.ts
import { BatchScheduler } from '../src/scheduler/index.ts';
import type { SchedulerOptionsInput, SchedulerRequest } from '../src/scheduler/index.ts';
import { prng } from '../src/runtime/demo-load.ts';

const QUEUED = 10_000;
const DISPATCHES = 20_000;

const rng = prng;

interface Case {
  name: string;
  options: SchedulerOptionsInput;
  bucketed: boolean;
  /** Share of new requests whose deadline is already unreachable (they get expired by decide). */
  doomedShare: number;
}

const common: SchedulerOptionsInput = {
  maxBatchSize: 32,
  gears: [1, 2, 4, 8, 16, 32],
  priorityLevels: 3,
  maxQueueDelayMs: [0, 5, 20],
  softLimitItems: 1_000_000,
  hardLimitItems: 2_000_000,
};

const cases: Case[] = [
  { name: 'plain, aging on', options: { ...common, agingMs: 1000 }, bucketed: false, doomedShare: 0 },
  { name: 'plain, aging off', options: { ...common, agingMs: null }, bucketed: false, doomedShare: 0 },
  { name: '4 buckets, aging on', options: { ...common, agingMs: 1000, buckets: [16, 32, 64, 128] }, bucketed: true, doomedShare: 0 },
  { name: 'plain, 10% expire in decide', options: { ...common, agingMs: 1000 }, bucketed: false, doomedShare: 0.1 },
];

function run(c: Case): { nsPerDispatched: number; nsPerDecide: number; nsPerEnqueue: number; meanBatch: number; expired: number } {
  const r = rng(1);
  const s = new BatchScheduler<null>(c.options);
  let seq = 0;
  let now = 0;
  const make = (): SchedulerRequest<null> => {
    const doomed = r() < c.doomedShare;
    return {
      id: `r${seq++}`,
      priority: Math.floor(r() * 3),
      items: r() < 0.8 ? 1 : r() < 0.75 ? 2 : 4,
      arrivedAt: now - r() * 50,
      deadlineAt: doomed ? now + 1 : r() < 0.7 ? now + 1_000_000 + r() * 1_000_000 : undefined,
      length: c.bucketed ? 1 + Math.floor(r() * 128) : undefined,
      payload: null,
    };
  };
  for (let i = 0; i < QUEUED; i++) s.enqueue(make());
  let decideNs = 0n;
  let enqueueNs = 0n;
  let dispatched = 0;
  let decides = 0;
  let batches = 0;
  let expired = 0;
  for (let i = 0; i < DISPATCHES; i++) {
    now += 0.5;
    const t0 = process.hrtime.bigint();
    const d = s.decide(now);
    const t1 = process.hrtime.bigint();
    decideNs += t1 - t0;
    decides++;
    expired += d.expired.length;
    let leaving = d.expired.length;
    if (d.kind === 'dispatch') {
      dispatched += d.batch.members.length;
      leaving += d.batch.members.length;
      batches++;
      s.recordCompletion(d.batch.gear, 4 + 0.25 * d.batch.gear, now);
    }
    const t2 = process.hrtime.bigint();
    for (let k = 0; k < leaving; k++) s.enqueue(make());
    enqueueNs += process.hrtime.bigint() - t2;
  }
  if (s.queuedRequests !== QUEUED) throw new Error(`queue drifted to ${s.queuedRequests}`);
  return {
    nsPerDispatched: Number(decideNs) / dispatched,
    nsPerDecide: Number(decideNs) / decides,
    nsPerEnqueue: Number(enqueueNs) / (dispatched + expired),
    meanBatch: dispatched / batches,
    expired,
  };
}

console.log(`decide() with ${QUEUED} requests queued, ${DISPATCHES} decisions per case (first pass is warm-up)`);
for (const c of cases) run(c); // warm-up (JIT)
console.log('case'.padEnd(30) + 'µs/dispatched req'.padStart(19) + 'µs/decide'.padStart(11) + 'µs/enqueue'.padStart(12) + 'req/batch'.padStart(11) + 'expired'.padStart(9) + '  target <= 5 µs');
for (const c of cases) {
  const m = run(c);
  console.log(
    c.name.padEnd(30) +
      (m.nsPerDispatched / 1000).toFixed(3).padStart(19) +
      (m.nsPerDecide / 1000).toFixed(2).padStart(11) +
      (m.nsPerEnqueue / 1000).toFixed(3).padStart(12) +
      m.meanBatch.toFixed(1).padStart(11) +
      String(m.expired).padStart(9) +
      (m.nsPerDispatched <= 5000 ? '  ok' : '  MISSED'),
  );
}
