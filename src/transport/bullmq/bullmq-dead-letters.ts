import { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { BullmqSettings } from '../../contracts/fleet-config.ts';
import { checkQuery, ListingBuilder, ReplayTally, sourcePriority, type DeadLetter, type DeadLetterListing, type DeadLetterQuery, type DeadLetters, type ReplayOptions, type ReplayReport } from '../dead-letters.ts';
import { renderName, replyToProblem } from '../names.ts';
import { bullmqError, ensureRedisAnswers, jobIdFor, KEEP_COMPLETED, KEEP_FAILED, redisConnection, toBullmqPriority } from './bullmq-names.ts';

/** Jobs read per Redis round trip. */
const PAGE = 500;

interface DlqJobData {
  readonly reason?: unknown;
  readonly message?: unknown;
  readonly source?: { readonly queue?: unknown; readonly jobId?: unknown };
  readonly priority?: unknown;
  readonly original?: unknown;
}

const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const level = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);

/**
 * A model's BullMQ DLQ (see DeadLetters): records are waiting jobs of `{model}.dlq` whose data is
 * `{reason, message, source: {queue, jobId}, priority, original}`. A replayed record's job leaves
 * the DLQ once its request is re-added. `jobId = id` means BullMQ would ignore the re-add while
 * the earlier job of that id is retained, and the new reply while the earlier reply is: replay
 * removes both first (an earlier request still waiting or running is left alone, and its record
 * is skipped). JS thread only.
 */
export class BullmqDeadLetters implements DeadLetters {
  private readonly connection: Redis;
  private readonly queues = new Map<string, Queue>();
  private ready: Promise<void> | undefined;

  constructor(private readonly settings: BullmqSettings) {
    this.connection = redisConnection(settings.redisUrl);
  }

  async list(query: DeadLetterQuery): Promise<DeadLetterListing> {
    checkQuery(query);
    const listing = new ListingBuilder(query);
    await this.scan(query.model, (_job, letter) => {
      listing.add(letter);
      return Promise.resolve(false);
    });
    return listing.build();
  }

  async replay(options: ReplayOptions): Promise<ReplayReport> {
    checkQuery(options);
    const tally = new ReplayTally(options);
    await this.scan(options.model, async (job, letter, data) => {
      tally.progress();
      if (!tally.read(letter)) return false;
      if (tally.full) return 'stop';
      tally.matched++;
      const why = await this.replayOne(options, letter, data, job);
      if (why !== undefined) {
        tally.skipped.push({ ref: letter.ref, why });
        return false;
      }
      tally.replayed++;
      return options.dryRun !== true;
    });
    tally.progress(true);
    return tally.report();
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.queues.values()].map((q) => q.close()));
    this.queues.clear();
    this.connection.disconnect();
  }

  /** Re-adds one record's request (unless a dry run); returns why it cannot be, or undefined. */
  private async replayOne(options: ReplayOptions, letter: DeadLetter, data: DlqJobData, dlqJob: Job): Promise<string | undefined> {
    const { model } = options;
    if (letter.source === undefined || sourcePriority(this.settings.queueTemplate, model, letter.source) === null) {
      return `its source ${letter.source ?? '(none recorded)'} is not a request queue of ${model}`;
    }
    const priority = letter.priority ?? options.priority;
    if (priority === undefined) return 'no priority recorded; give one (--priority)';
    const source = this.queue(letter.source);
    const jobId = letter.requestId === undefined ? undefined : jobIdFor(letter.requestId);
    try {
      if (jobId !== undefined) {
        const earlier = await Job.fromId(source, jobId);
        const state = earlier === undefined ? undefined : await earlier.getState();
        if (earlier !== undefined && state !== 'completed' && state !== 'failed') {
          return `request ${letter.requestId} is still in ${letter.source} (${state}); replay it once that one is answered`;
        }
        if (options.dryRun === true) return undefined;
        await earlier?.remove();
        const original = data.original as { replyTo?: unknown } | undefined;
        const replyTo = text(original?.replyTo) ?? renderName(this.settings.repliesTemplate, model);
        if (replyToProblem('bullmq', replyTo) === undefined) {
          const reply = await Job.fromId(this.queue(replyTo), jobId);
          if (reply !== undefined && (await reply.getState()) === 'active') {
            return `the earlier reply to ${letter.requestId} on ${replyTo} is being read right now; replay again in a moment`;
          }
          await reply?.remove();
        }
      }
      if (options.dryRun === true) return undefined;
      await source.add('request', data.original, {
        ...(jobId === undefined ? {} : { jobId }),
        priority: toBullmqPriority(priority),
        removeOnComplete: KEEP_COMPLETED,
        removeOnFail: KEEP_FAILED,
      });
      await dlqJob.remove();
      return undefined;
    } catch (err) {
      throw bullmqError(err, `replaying DLQ record ${letter.ref} failed; records before it were replayed, it and the rest were not`);
    }
  }

  /**
   * Every DLQ job, oldest first. `visit` returns true when it removed the job (the page cursor
   * then stays put, as later jobs move up), 'stop' to end the scan.
   */
  private async scan(model: string, visit: (job: Job, letter: DeadLetter, data: DlqJobData) => Promise<boolean | 'stop'>): Promise<void> {
    this.ready ??= ensureRedisAnswers(this.connection, this.settings.redisUrl, this.settings.connectTimeoutMs, 'reading the DLQ failed');
    await this.ready;
    const dlq = this.queue(renderName(this.settings.dlqTemplate, model));
    let cursor = 0;
    for (;;) {
      let page: Job[];
      try {
        page = await dlq.getJobs(['wait'], cursor, cursor + PAGE - 1, true);
      } catch (err) {
        throw bullmqError(err, `reading the DLQ queue ${dlq.name} failed`);
      }
      if (page.length === 0) return;
      let removed = 0;
      for (const job of page) {
        const data = (typeof job.data === 'object' && job.data !== null ? job.data : {}) as DlqJobData;
        const verdict = await visit(job, letterOf(dlq.name, job, data), data);
        if (verdict === 'stop') return;
        if (verdict) removed++;
      }
      cursor += page.length - removed;
    }
  }

  private queue(name: string): Queue {
    let q = this.queues.get(name);
    if (q === undefined) {
      q = new Queue(name, { connection: this.connection, prefix: this.settings.prefix });
      this.queues.set(name, q);
    }
    return q;
  }
}

function letterOf(queue: string, job: Job, data: DlqJobData): DeadLetter {
  const original = typeof data.original === 'object' && data.original !== null ? (data.original as Record<string, unknown>) : undefined;
  return {
    ref: `${queue}/${job.id ?? ''}`,
    reason: text(data.reason) ?? '',
    message: text(data.message) ?? '',
    source: text(data.source?.queue),
    priority: level(data.priority) ?? level(original?.priority),
    requestId: text(original?.id) || undefined,
    deadAt: job.timestamp,
    bytes: Buffer.byteLength(JSON.stringify(data.original ?? null)),
  };
}
