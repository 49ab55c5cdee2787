import { BatchScheduler } from '../../../src/scheduler/index.ts';
import type { Batch, Decision, SchedulerOptionsInput, SchedulerRequest } from '../../../src/scheduler/index.ts';
import { reachMs } from './scheduler-fixtures.ts';

/**
 * A driver closer to the worker than sim-driver: two batches in flight (the second formed while
 * the first runs, so decide gets a deviceFreeAt in the future), a level cap while the device is
 * busy, cancellations, and device times that include 0 ms and rare huge outliers. It records
 * every invariant breach instead of asserting, so a property can print the first one.
 */
export interface Step {
  gapMs: number;
  priority: number;
  items: number;
  deadlineMs: number | null;
  bytes: number;
  length?: number;
  /** Cancel the request that arrived this many steps earlier (if still queued). */
  cancelBack: number | null;
}

export interface DeviceModel {
  baseMs: number;
  perItemMs: number;
  /** Every k-th batch takes outlierMs instead (0: never). */
  outlierEvery: number;
  outlierMs: number;
  /** Every k-th batch reports 0 ms (0: never). */
  zeroEvery: number;
}

export interface RunResult {
  breaches: string[];
  ends: Map<string, string[]>;
  accepted: Set<string>;
  scheduler: BatchScheduler<number>;
  /** Requests still queued when nothing was left to happen (no arrival, no batch, no wake). */
  stranded: string[];
}

export function runRuntimeLike(options: SchedulerOptionsInput, steps: readonly Step[], device: DeviceModel): RunResult {
  const s = new BatchScheduler<number>(options);
  const breaches: string[] = [];
  const ends = new Map<string, string[]>();
  const accepted = new Set<string>();
  const end = (id: string, how: string) => ends.set(id, [...(ends.get(id) ?? []), how]);
  const reqs: SchedulerRequest<number>[] = [];
  let t = 0;
  steps.forEach((st, i) => {
    t += st.gapMs;
    reqs.push({ id: `r${i}`, priority: st.priority, items: st.items, arrivedAt: t, deadlineAt: st.deadlineMs === null ? undefined : t + st.deadlineMs, bytes: st.bytes, length: st.length, payload: i });
  });
  const inflight: { batch: Batch<number>; doneAt: number }[] = [];
  let freeAt = -Infinity;
  let wakeAt = Infinity;
  let next = 0;
  let batchNo = 0;
  // Never expires a request that some batch holding it (padded up as needed) could still serve...
  const checkExpired = (expired: readonly SchedulerRequest<number>[], startAt: number) => {
    for (const e of expired) {
      end(e.id, 'expired');
      const doneAt = startAt + reachMs(s, e.items);
      if (doneAt <= (e.deadlineAt ?? Infinity)) breaches.push(`${e.id} expired at start ${startAt}, though it could end by ${doneAt} <= ${e.deadlineAt}`);
    }
  };
  // ...and leaves none queued that cannot, wherever it sits in its lane (checked by scanning the
  // queue here, not through nextUnreachableAt, which must agree).
  const checkTimely = (startAt: number) => {
    let latestStart = Infinity;
    for (const r of reqs) {
      if (r.deadlineAt === undefined || !s.has(r.id)) continue;
      const doneAt = startAt + reachMs(s, r.items);
      if (doneAt > r.deadlineAt) breaches.push(`${r.id} is still queued after expiring at ${startAt}, though it cannot end before ${doneAt} > ${r.deadlineAt}`);
      latestStart = Math.min(latestStart, r.deadlineAt - reachMs(s, r.items));
    }
    if (s.nextUnreachableAt() !== latestStart) breaches.push(`nextUnreachableAt ${s.nextUnreachableAt()} != ${latestStart}`);
  };
  const check = (d: Decision<number>, now: number, startAt: number) => {
    checkExpired(d.expired, startAt);
    if (d.kind === 'wait' && !(Number.isFinite(d.untilAt) && d.untilAt > now)) breaches.push(`wait until ${d.untilAt} at ${now}`);
    if (d.kind !== 'dispatch') return;
    const b = d.batch;
    if (!Number.isFinite(b.estimatedDeviceMs) || b.estimatedDeviceMs <= 0) breaches.push(`estimate ${b.estimatedDeviceMs}`);
    if (b.startAt !== startAt) breaches.push(`startAt ${b.startAt} != ${startAt}`);
    for (const m of b.members) {
      end(m.id, 'batch');
      const deadline = m.deadlineAt ?? Infinity;
      if (!b.probe && deadline < b.startAt + b.estimatedDeviceMs) breaches.push(`${m.id} deadline ${deadline} < ${b.startAt} + ${b.estimatedDeviceMs}`);
      if (deadline <= b.startAt) breaches.push(`${m.id} deadline ${deadline} <= start ${b.startAt}`);
    }
  };
  for (let guard = 0; guard < 200_000; guard++) {
    const arrival = next < reqs.length ? (reqs[next] as SchedulerRequest<number>).arrivedAt : Infinity;
    const completion = inflight[0]?.doneAt ?? Infinity;
    const now = Math.min(arrival, completion, wakeAt);
    if (now === Infinity) break;
    while (inflight.length > 0 && (inflight[0] as { doneAt: number }).doneAt <= now) {
      const f = inflight.shift() as { batch: Batch<number>; doneAt: number };
      batchNo++;
      const ms =
        device.zeroEvery > 0 && batchNo % device.zeroEvery === 0
          ? 0
          : device.outlierEvery > 0 && batchNo % device.outlierEvery === 0
            ? device.outlierMs
            : device.baseMs + device.perItemMs * f.batch.gear;
      s.recordCompletion(f.batch.gear, ms, now);
    }
    while (next < reqs.length && (reqs[next] as SchedulerRequest<number>).arrivedAt <= now) {
      const i = next++;
      const r = reqs[i] as SchedulerRequest<number>;
      if (s.enqueue(r).kind !== 'rejected') accepted.add(r.id);
      const back = (steps[i] as Step).cancelBack;
      if (back !== null && i - back >= 0) {
        const gone = s.remove(`r${i - back}`);
        if (gone !== undefined) end(gone.id, 'removed');
      }
    }
    wakeAt = Infinity;
    if (inflight.length < 2) {
      const busy = inflight.length > 0;
      const startAt = busy ? Math.max(now, freeAt) : now;
      const d = s.decide(now, startAt, busy ? 0 : Infinity);
      check(d, now, startAt);
      if (d.kind === 'dispatch') {
        const doneAt = Math.max(now, freeAt) + device.baseMs + device.perItemMs * d.batch.gear;
        freeAt = doneAt;
        inflight.push({ batch: d.batch, doneAt });
        wakeAt = now; // pump again at once, as the worker does
      } else if (d.kind === 'wait') wakeAt = d.untilAt;
    } else {
      checkExpired(s.collectExpired(now, freeAt), Math.max(now, freeAt));
      checkTimely(Math.max(now, freeAt));
      const at = s.nextUnreachableAt() + 1;
      if (Number.isNaN(at)) breaches.push('nextUnreachableAt NaN');
      wakeAt = Math.max(at, now + 1e-6);
    }
  }
  const stranded = [...reqs.filter((r) => s.has(r.id)).map((r) => r.id)];
  for (const r of s.drain()) end(r.id, 'drained');
  const st = s.stats(t);
  if (st.queuedRequests !== 0 || st.queuedItems !== 0 || st.queuedBytes !== 0) breaches.push(`accounting ${st.queuedRequests}/${st.queuedItems}/${st.queuedBytes}`);
  for (const l of st.levels) if (l.requests !== 0 || l.items !== 0) breaches.push(`level ${l.level} ${l.requests}/${l.items}`);
  if (st.intakePaused) breaches.push('intake still paused on an empty queue');
  for (const id of accepted) if ((ends.get(id) ?? []).length !== 1) breaches.push(`${id} ends ${JSON.stringify(ends.get(id))}`);
  for (const [id, e] of ends) if (!accepted.has(id)) breaches.push(`${id} was rejected but ended ${JSON.stringify(e)}`);
  return { breaches, ends, accepted, scheduler: s, stranded };
}
