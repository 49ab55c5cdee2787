import type { Admin, Kafka } from 'kafkajs';
import { isPrivateInbox } from '../names.ts';
import { ensureTopics } from './kafka-client.ts';

interface Waiter {
  /** Topics still being created for it. */
  left: number;
  done: boolean;
  readonly ready: (batch: number) => void;
  readonly fail: (err: unknown) => void;
}

/** Only a cache of what exists, kept bounded: every request() client names its own inbox. */
const MAX_KNOWN = 10_000;
/**
 * An inbox missing from the metadata is looked for once more after this: a broker's metadata may
 * lag a creation by a moment, and one taken for gone while its client waits would lose the reply.
 */
const CONFIRM_GONE_MS = 250;

/**
 * A reply topic asked for here is nearly always new: no listing of the cluster's topics first (the
 * broker's TOPIC_ALREADY_EXISTS tells the others), and no wait for leaders in the metadata, which
 * `served` covers by asking the leaders themselves.
 */
const CREATE_ON_FIRST_USE = { listFirst: false, waitForLeaders: true } as const;

/**
 * The topics the worker's results may go to: those known to exist, and the creation of the others
 * (reply topics a request names are created on first use: auto-create may be off, and metadata
 * refreshes never create topics). Creation runs in the background, apart from the send path:
 * creating a topic costs the broker ~150 ms, and results for topics that exist must not wait
 * for it. One creation in flight per topic; topics asked for while a createTopics call is in
 * flight go together in the next one. JS thread only; the admin client is the transport's.
 *
 * A request() client's private inbox (isPrivateInbox) is looked for instead of created: its
 * client made it before naming it, so missing it is gone, deleted as the client closed, and a
 * topic created again for it would never be deleted (under client churn the cluster filled up
 * with dead inboxes). Such a topic counts as settled too, as gone: its results go elsewhere
 * (OutgoingMessage.orElse).
 */
export class ReplyTopics {
  private readonly known = new Set<string>();
  /** Inboxes found gone: a uuid names each, so one never comes back. */
  private readonly gone = new Set<string>();
  /** Topics being created (or queued for it), with who waits for each. */
  private readonly waiters = new Map<string, Waiter[]>();
  private queued: string[] = [];
  private creating = false;
  /** Numbers the createTopics calls: ready() tells which one made the last of a caller's topics. */
  private batches = 0;

  constructor(
    private readonly admin: Admin,
    /** For the throwaway admin clients of untilServed. */
    private readonly kafka: Kafka,
    /** Partitions of the topics it creates. */
    private readonly partitions: number,
    /** An inbox was found gone (once per inbox). */
    private readonly onGone: (inbox: string) => void = () => undefined,
  ) {}

  add(topics: Iterable<string>): void {
    for (const t of topics) this.remember(t);
  }

  /** Gone from the cluster: a result for it creates it again, like a first use. */
  forget(topic: string): void {
    this.known.delete(topic);
  }

  /** Known to exist, or (an inbox) known to be gone. */
  has(topic: string): boolean {
    return this.known.has(topic) || this.gone.has(topic);
  }

  /** Whether `topic` is a client's inbox found gone. */
  isGone(topic: string): boolean {
    return this.gone.has(topic);
  }

  /** Whether every message's topic is known (to exist, or to be gone): no allocation, the per-result check. */
  allKnown(messages: ReadonlyArray<{ readonly topic: string }>): boolean {
    for (const m of messages) if (!this.has(m.topic)) return false;
    return true;
  }

  /**
   * Calls `ready` once every message's topic exists or, a client's inbox, is found gone
   * (synchronously when they are all known already), or
   * `fail` with the first creation failure among them. Callers waiting for the same topic are
   * called in the order they asked, in one go, so results of one stream keep their order; those
   * made ready by one createTopics call get the same `batch` number (from 1), and nobody else
   * does; 0 when nothing had to be created.
   */
  whenKnown(messages: ReadonlyArray<{ readonly topic: string }>, ready: (batch: number) => void, fail: (err: unknown) => void): void {
    const unknown = new Set<string>();
    for (const m of messages) if (!this.has(m.topic)) unknown.add(m.topic);
    if (unknown.size === 0) return ready(0);
    const waiter: Waiter = { left: unknown.size, done: false, ready, fail };
    for (const topic of unknown) {
      const list = this.waiters.get(topic);
      if (list !== undefined) {
        list.push(waiter);
        continue;
      }
      this.waiters.set(topic, [waiter]);
      this.queued.push(topic);
    }
    void this.pump();
  }

  /** Whether every unknown topic of the messages is being created for someone already. */
  allAwaited(messages: ReadonlyArray<{ readonly topic: string }>): boolean {
    for (const m of messages) if (!this.has(m.topic) && !this.waiters.has(m.topic)) return false;
    return true;
  }

  /** whenKnown() as a promise. */
  ensure(topics: readonly string[]): Promise<void> {
    return new Promise<void>((resolve, reject) => this.whenKnown(topics.map((topic) => ({ topic })), () => resolve(), reject));
  }

  private async pump(): Promise<void> {
    if (this.creating) return;
    this.creating = true;
    try {
      while (this.queued.length > 0) {
        const batch = this.queued;
        this.queued = [];
        await this.create(batch);
      }
    } finally {
      this.creating = false;
    }
  }

  private async create(topics: readonly string[]): Promise<void> {
    const inboxes = topics.filter(isPrivateInbox);
    if (inboxes.length === 0) return this.createNow(topics);
    await this.lookFor(inboxes);
    if (inboxes.length < topics.length) await this.createNow(topics.filter((t) => !isPrivateInbox(t)));
  }

  /** Client inboxes: those that exist are known, the others gone (see the class comment). */
  private async lookFor(inboxes: readonly string[]): Promise<void> {
    let missing: string[];
    try {
      missing = await this.missing(inboxes);
      if (missing.length > 0) {
        await new Promise((resolve) => setTimeout(resolve, CONFIRM_GONE_MS));
        missing = await this.missing(missing);
      }
    } catch (err) {
      for (const t of inboxes) this.failed(t, err);
      return;
    }
    const batch = ++this.batches;
    for (const t of inboxes) {
      if (!missing.includes(t)) {
        this.created(t, batch);
        continue;
      }
      if (this.gone.size >= MAX_KNOWN) this.gone.clear();
      this.gone.add(t);
      this.onGone(t);
      this.release(t, batch);
    }
  }

  private async missing(topics: readonly string[]): Promise<string[]> {
    // listTopics, not a metadata request naming them: that one may create them (broker auto-create).
    const existing = new Set(await this.admin.listTopics());
    return topics.filter((t) => !existing.has(t));
  }

  private async createNow(topics: readonly string[]): Promise<void> {
    try {
      await ensureTopics(this.admin, topics, this.partitions, CREATE_ON_FIRST_USE);
      await this.served(topics);
      const batch = ++this.batches;
      for (const t of topics) this.created(t, batch);
    } catch (err) {
      if (topics.length === 1) return this.failed(topics[0] as string, err);
      // One name the broker refuses must not fail the others (those it created are found now).
      await Promise.all(
        topics.map(async (t) => {
          try {
            await ensureTopics(this.admin, [t], this.partitions, CREATE_ON_FIRST_USE);
          } catch (e) {
            return this.failed(t, e);
          }
          await this.served([t]);
          this.created(t, ++this.batches);
        }),
      );
    }
  }

  /**
   * The metadata names a leader before that broker has taken a new partition up: a produce
   * request sent meanwhile is refused (NOT_LEADER_OR_FOLLOWER) and kafkajs retries it whole, with
   * the results of other topics sent with it, which then went out twice while the send path
   * waited for the retries. Best effort: when the leaders cannot be asked, the first send finds out.
   */
  private async served(topics: readonly string[]): Promise<void> {
    await untilServed(this.kafka, topics).catch(() => undefined);
  }

  private created(topic: string, batch: number): void {
    this.remember(topic);
    this.release(topic, batch);
  }

  /** The waiters for `topic`: it is settled (created, found, or found gone). */
  private release(topic: string, batch: number): void {
    const list = this.waiters.get(topic) ?? [];
    this.waiters.delete(topic);
    for (const w of list) {
      if (w.done || --w.left > 0) continue;
      w.done = true;
      w.ready(batch);
    }
  }

  private failed(topic: string, err: unknown): void {
    // Not remembered: the next result for it tries again (the runtime retries a failed settle).
    const list = this.waiters.get(topic) ?? [];
    this.waiters.delete(topic);
    for (const w of list) {
      if (w.done) continue;
      w.done = true;
      w.fail(err);
    }
  }

  private remember(topic: string): void {
    if (this.known.size >= MAX_KNOWN) this.known.clear();
    this.known.add(topic);
  }
}

/**
 * Asks the leaders of every partition of `topics` for their offsets until they all answer (a
 * leader that has not taken a new partition up yet refuses, and kafkajs gives up after one such
 * answer), for at most `budgetMs`; a refusal for good (e.g. not authorized) ends it at once. A throwaway admin client: kafkajs refreshes metadata for every
 * topic an admin ever asked about, and reply topics come and go.
 */
async function untilServed(kafka: Kafka, topics: readonly string[], budgetMs = 10_000): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const deadline = Date.now() + budgetMs;
    for (let waitMs = 25; ; waitMs = Math.min(2 * waitMs, 500)) {
      try {
        await Promise.all(topics.map((t) => admin.fetchTopicOffsets(t)));
        return;
      } catch (err) {
        if ((err as { retriable?: boolean }).retriable === false || Date.now() + waitMs > deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, waitMs));
      }
    }
  } finally {
    await admin.disconnect();
  }
}
