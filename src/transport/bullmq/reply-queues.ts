import type { Redis } from 'ioredis';
import type { TransportLogger } from '../kafka/kafka-client.ts';

/** Removes up to `limit` jobs of `queue` in `state` older than `graceMs`; resolves to how many. */
export type CleanJobs = (queue: string, graceMs: number, limit: number, state: 'wait' | 'completed') => Promise<number>;

/** Queues noted per worker between two notes of the same queue, at most (the oldest is noted again). */
const MAX_NOTED = 10_000;
const CLEAN_CHUNK = 1_000;
const PAGE = 1_000;

/** The keys of a queue that hold jobs; any of them present keeps the queue. */
const JOB_STATES = ['wait', 'active', 'prioritized', 'delayed', 'paused', 'completed', 'failed', 'waiting-children'];
/** A queue's bookkeeping, left behind once its jobs are gone (the events stream alone grows to ~10,000 entries, 0.6 MB). */
const BOOKKEEPING = ['meta', 'events', 'id', 'marker', 'pc', 'stalled', 'stalled-check'];

/**
 * Forgets a reply queue nobody was answered on since ARGV[2] (its registry score is older), once
 * nothing is left in it: no job in any state and not paused by its owner. Deletes its bookkeeping
 * and its registry entry; returns 1, else 0. Atomic, so an answer noted meanwhile keeps it.
 * KEYS: registry, the JOB_STATES keys, then the BOOKKEEPING keys (meta first). ARGV: queue, idle-before.
 */
const FORGET_IDLE = `
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > tonumber(ARGV[2]) then return 0 end
for i = 2, ${1 + JOB_STATES.length} do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
local meta = KEYS[${2 + JOB_STATES.length}]
if redis.call('HEXISTS', meta, 'paused') == 1 then return 0 end
for i = ${2 + JOB_STATES.length}, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
`;

export interface ReplyQueuesOptions {
  readonly redis: () => Redis;
  /** BullMQ key prefix. */
  readonly prefix: string;
  /** Redis key of a model's registry (a sorted set: reply queue -> when last noted). */
  readonly registryKey: (model: string) => string;
  /** Redis key of a model's sweep claim for one round. */
  readonly claimKey: (model: string) => string;
  /** A model's default reply queue: swept as a fixed target already, never forgotten. */
  readonly defaultQueue: (model: string) => string;
  readonly ttlMs: number;
  /** Age past which a result its reader took is removed (the reply jobs' removeOnComplete age). */
  readonly keepCompletedMs: number;
  readonly clean: CleanJobs;
  readonly logger?: TransportLogger | undefined;
}

/**
 * Why: a BullMQ queue keeps a waiting job until someone takes it, and a worker answers on whatever
 * queue each request names: the inbox of a client that crashed (its close() would have removed
 * it), a queue its reader stopped reading. Sweeping only the models' default reply queues, results
 * on those grew Redis for good. So the workers note in Redis, per model, each reply queue they
 * answer on and when, and each sweep round one worker (a claim per round) removes the results
 * older than replyTtlMs from every noted queue, as for the default queue, and forgets a queue
 * nobody was answered on for longer, with its leftover keys, once it is empty. JS thread only.
 */
export class ReplyQueues {
  /** registry key + queue -> when this worker last noted it. */
  private readonly noted = new Map<string, number>();

  constructor(private readonly o: ReplyQueuesOptions) {}

  /** Whether queues are kept at all (replyTtlMs 0 keeps results until taken). */
  get enabled(): boolean {
    return this.o.ttlMs > 0;
  }

  /** How often a worker notes a queue it keeps answering on: lastAt in Redis lags by at most this. */
  private get noteEveryMs(): number {
    return Math.max(1, Math.min(60_000, Math.floor(this.o.ttlMs / 4)));
  }

  /** Notes the queues answers of `model` are about to be published to; resolves at once when there is nothing new. */
  note(model: string, queues: Iterable<string>, nowMs = Date.now()): Promise<unknown> {
    if (!this.enabled) return Promise.resolve();
    const key = this.o.registryKey(model);
    const fresh: string[] = [];
    for (const queue of queues) {
      if (queue === this.o.defaultQueue(model)) continue;
      const id = `${key}\n${queue}`;
      const at = this.noted.get(id);
      if (at !== undefined && nowMs - at < this.noteEveryMs) continue;
      this.noted.delete(id);
      this.noted.set(id, nowMs);
      fresh.push(nowMs.toString(), queue);
    }
    for (const id of this.noted.keys()) {
      if (this.noted.size <= MAX_NOTED) break;
      this.noted.delete(id);
    }
    return fresh.length === 0 ? Promise.resolve() : this.o.redis().zadd(key, ...fresh);
  }

  /** One round over the noted queues of `models`, for the models this worker wins the round of; how many results it removed. */
  async sweep(models: readonly string[], intervalMs: number, nowMs = Date.now()): Promise<number> {
    if (!this.enabled) return 0;
    let removed = 0;
    for (const model of models) {
      try {
        if ((await this.o.redis().set(this.o.claimKey(model), '1', 'PX', Math.max(1, intervalMs - 50), 'NX')) !== 'OK') continue;
        removed += await this.sweepModel(model, nowMs);
      } catch (err) {
        this.o.logger?.warn({ err, model }, 'sweeping the reply queues answered on failed; tried again at the next sweep');
      }
    }
    return removed;
  }

  private async sweepModel(model: string, nowMs: number): Promise<number> {
    const key = this.o.registryKey(model);
    const queues: string[] = [];
    for (let start = 0; ; start += PAGE) {
      const page = await this.o.redis().zrange(key, start, start + PAGE - 1);
      queues.push(...page);
      if (page.length < PAGE) break;
    }
    // Noted before this, the queue's newest answer is older than the TTL (notes lag by noteEveryMs).
    const idleBefore = nowMs - this.o.ttlMs - this.noteEveryMs;
    let removed = 0;
    let forgotten = 0;
    for (const queue of queues) {
      removed += await this.cleanState(queue, 'wait', this.o.ttlMs);
      // Results taken are kept a while (answering twice is caught by their job ids) and removed by
      // age only when the next one completes there: never, once the reader is gone.
      await this.cleanState(queue, 'completed', this.o.keepCompletedMs);
      const keys = [key, ...[...JOB_STATES, ...BOOKKEEPING].map((k) => `${this.o.prefix}:${queue}:${k}`)];
      const gone = await this.o.redis().eval(FORGET_IDLE, keys.length, ...keys, queue, idleBefore.toString());
      if (gone === 1) forgotten++;
    }
    if (removed > 0 || forgotten > 0) {
      this.o.logger?.info({ model, removed, forgotten, ttlMs: this.o.ttlMs }, 'reply queues: removed results older than replyTtlMs nobody took, forgot queues nobody was answered on since');
    }
    return removed;
  }

  /** Not when empty: clean() would add an event to the queue's stream all the same. */
  private async cleanState(queue: string, state: 'wait' | 'completed', graceMs: number): Promise<number> {
    const key = `${this.o.prefix}:${queue}:${state}`;
    let removed = 0;
    for (;;) {
      const size = state === 'wait' ? await this.o.redis().llen(key) : await this.o.redis().zcard(key);
      if (size === 0) return removed;
      const n = await this.o.clean(queue, graceMs, CLEAN_CHUNK, state);
      removed += n;
      if (n < CLEAN_CHUNK) return removed;
    }
  }
}
