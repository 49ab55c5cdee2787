import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { resultToJson } from '../../codec/index.ts';
import type { BullmqSettings } from '../../contracts/fleet-config.ts';
import { notOpenError, type DeliveryLedger } from '../delivery-ledger.ts';
import type { TransportLogger } from '../kafka/kafka-client.ts';
import type { Delivery, Outcome } from '../transport.ts';
import { dropAnsweredInputs, mayHoldLargeInput } from './answered-inputs.ts';
import { answerJobs, type OutJob } from './answer-jobs.ts';
import { bullmqError } from './bullmq-names.ts';
import type { HeldJob } from './held-job.ts';
import type { QueueCache } from './queue-cache.ts';
import type { ReplyQueues } from './reply-queues.ts';
import type { SuspectStore } from './suspect-store.ts';

export interface JobSettlerOptions {
  readonly settings: BullmqSettings;
  readonly ledger: DeliveryLedger<HeldJob>;
  /** Reply and DLQ queues (the transport's, closed by it). */
  readonly outQueues: QueueCache<Queue>;
  /** The transport's model workers: the request queue each model's suspects are kept under. */
  readonly workers: ReadonlyMap<string, { readonly queue: string }>;
  readonly suspects: SuspectStore;
  /** Notes the reply queues answered on, so they are swept too. */
  readonly replyQueues: ReplyQueues;
  /** The transport's shared connection. */
  readonly redis: () => Redis;
  readonly logger?: TransportLogger | undefined;
}

/**
 * The transport's answering side for the jobs it holds: settle publishes each outcome's result
 * (and DLQ record) to its queues, one addBulk per queue, then completes the job with the result
 * as its return value; release moves jobs back to wait; markSuspect records a hung batch's jobs.
 * JS thread only; the transport's ledger says which jobs are held and claims them.
 */
export class JobSettler {
  constructor(private readonly o: JobSettlerOptions) {}

  /** Runs inside the ledger's guard (BullmqTransport.settle). */
  async settle(outcomes: readonly Outcome[]): Promise<void> {
    const { ledger, outQueues } = this.o;
    const { claimed, rejected } = ledger.claim(outcomes.map((o) => ({ deliveryId: o.delivery.deliveryId, outcome: o })));
    if (claimed.length > 0) {
      const byQueue = new Map<string, OutJob[]>();
      const repliesByModel = new Map<string, Set<string>>();
      const returnValues = new Map<string, unknown>();
      for (const { item, entry } of claimed) {
        const { outcome } = item;
        const json = resultToJson(outcome.result);
        returnValues.set(item.deliveryId, json);
        const source = { queue: entry.job.queueName, jobId: entry.job.id, data: entry.job.data, priority: outcome.delivery.priority, createdAt: entry.job.timestamp };
        for (const { queue, job } of answerJobs(this.o.settings, { model: entry.model, result: outcome.result, json, replyTo: outcome.replyTo, dlq: outcome.dlq, source })) {
          const list = byQueue.get(queue) ?? [];
          list.push(job);
          byQueue.set(queue, list);
          if (job.name === 'result') repliesByModel.set(entry.model, (repliesByModel.get(entry.model) ?? new Set()).add(queue));
        }
      }
      try {
        // Noted first: on the one shared connection a queue is known before an answer lands in it.
        const notes = [...repliesByModel].map(([model, queues]) => this.o.replyQueues.note(model, queues));
        await Promise.all([...notes, ...[...byQueue].map(([queue, jobs]) => outQueues.acquire(queue).addBulk(jobs))]);
      } catch (err) {
        for (const { item } of claimed) ledger.unclaim(item.deliveryId);
        throw bullmqError(err, 'publishing results failed; the jobs stay active (unacked)');
      } finally {
        for (const queue of byQueue.keys()) outQueues.release(queue);
      }
      const completions = claimed.map(async ({ item, entry }) => {
        try {
          await entry.complete(returnValues.get(item.deliveryId));
        } finally {
          ledger.finish(item.deliveryId);
        }
      });
      const results = await Promise.allSettled(completions);
      const answered = new Map<string, string[]>();
      claimed.forEach(({ entry }, i) => {
        // Small inputs stay (most requests): no script call for a batch of them.
        if (results[i]?.status !== 'fulfilled' || entry.job.id === undefined || !mayHoldLargeInput(entry.job.data)) return;
        const ids = answered.get(entry.job.queueName);
        if (ids === undefined) answered.set(entry.job.queueName, [entry.job.id]);
        else ids.push(entry.job.id);
      });
      // Not awaited: the answers are out and acked; this only trims what Redis keeps of them.
      if (answered.size > 0) void dropAnsweredInputs(this.o.redis(), this.o.settings.prefix, answered).catch((err: unknown) =>
        this.o.logger?.warn({ err }, 'could not drop the inputs of answered jobs; they stay until the jobs leave retention'),
      );
      // Answered for good: a suspect's count is no longer needed (rare, so one call each).
      for (const { item, entry } of claimed) {
        const mw = this.o.workers.get(entry.model);
        if ((item.outcome.delivery.suspectCount ?? 0) > 0 && mw !== undefined) this.o.suspects.forget(mw.queue, entry.job.id ?? '');
      }
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed !== undefined) {
        throw bullmqError(failed.reason, 'results are published but completing the job failed (lock lost?); it may be answered again');
      }
    }
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  async release(deliveries: readonly Delivery[]): Promise<void> {
    const { ledger } = this.o;
    const { claimed, rejected } = ledger.claim(deliveries);
    let failure: unknown;
    await Promise.all(
      claimed.map(async ({ item, entry }) => {
        try {
          await entry.moveBack();
        } catch (err) {
          // The lock is gone: the stalled check returns the job to wait anyway.
          failure ??= err;
        }
        ledger.finish(item.deliveryId);
      }),
    );
    if (failure !== undefined) this.o.logger?.warn({ err: failure }, 'release: moving a job back to wait failed');
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  /** The jobs of a hung batch: one more device hang each, kept beside their queue; false when some are not held here. */
  async markSuspect(deliveries: readonly Delivery[]): Promise<boolean> {
    const jobs = deliveries.flatMap((d) => {
      const entry = this.o.ledger.get(d.deliveryId);
      const mw = entry === undefined ? undefined : this.o.workers.get(entry.model);
      return entry === undefined || mw === undefined ? [] : [{ queue: mw.queue, jobId: entry.job.id ?? '' }];
    });
    try {
      await this.o.suspects.mark(jobs);
    } catch (err) {
      throw bullmqError(err, 'recording device-hang suspects failed');
    }
    return jobs.length === deliveries.length;
  }
}
