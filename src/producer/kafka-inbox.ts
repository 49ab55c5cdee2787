import type { Admin } from 'kafkajs';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { ensureTopics, type TransportLogger } from '../transport/kafka/kafka-client.ts';
import type { ReplyTopicPattern } from '../transport/names.ts';
import { privateInbox } from './private-inbox.ts';

/** How often at most a timed-out request() looks whether the inbox topic was deleted (checkGone). */
const INBOX_CHECK_MS = 5_000;

/** What the inbox needs of its KafkaProducer. */
export interface KafkaInboxHost {
  readonly clientId: string;
  readonly replyPattern: ReplyTopicPattern | undefined;
  readonly logger: TransportLogger | undefined;
  /** Topics the producer knows exist: the inbox is added once made, dropped once found deleted. */
  readonly knownTopics: Set<string>;
  connect(): Promise<{ admin: Admin }>;
  isClosed(): boolean;
  /** Starts the consumer of the inbox (its own group, from the beginning, into the reply router); resolves to its stop. */
  consume(topic: string, groupId: string): Promise<() => Promise<void>>;
}

/**
 * The private inbox of a KafkaProducer's request()s: a single-partition topic read by a private
 * consumer group, opened on the first request(), opened anew under a new name when found deleted
 * under the producer, and deleted on close.
 */
export class KafkaInbox {
  /** Replaced when found deleted under the producer (see checkGone). */
  private current: string;
  /** Why request() cannot use the inbox (a clientId the transport cannot name it with). */
  readonly refusal: FleetError | undefined;
  private ready: Promise<void> | undefined;
  /** The inbox topic may exist: deleted on close, even if opening the inbox failed after creating it. */
  private created = false;
  /** Stops the consumer of the open inbox. */
  private stopConsumer: (() => Promise<void>) | undefined;
  /** A checkGone under way, and when the last began. */
  private check: Promise<void> | undefined;
  private checkedAt = 0;
  /**
   * request()s waiting for the inbox to open: not in the router yet, so close() fails them here.
   * Else they waited for the opening to give up (about 5 s against a refused connection) and
   * rejected with its connection error instead of CLOSED.
   */
  private readonly awaiting = new Set<(error: FleetError) => void>();

  constructor(private readonly host: KafkaInboxHost) {
    const inbox = privateInbox('kafka', host.clientId, host.replyPattern);
    this.current = inbox.name;
    this.refusal = inbox.refusal;
  }

  /** `<clientId>.inbox.<uuid>`: the replyTo of the producer's request()s now. */
  get name(): string {
    return this.current;
  }

  /**
   * Waits for the inbox to open, for at most `waitMs`: timeoutMs bounds the whole request, and
   * opening the inbox against an unreachable broker retries for many seconds.
   */
  async waitOpened(requestId: string, timeoutMs: number, waitMs: number): Promise<void> {
    // A failed opening is forgotten, so a later request tries again (a broker down for a moment
    // would otherwise fail every request of this producer for good).
    const ready = this.opened();
    // Handled here: the wait below may give up first, and the opening goes on for later requests.
    ready.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    let failWait: ((error: FleetError) => void) | undefined;
    try {
      await Promise.race([
        ready,
        new Promise<never>((_, reject) => {
          failWait = reject;
          this.awaiting.add(reject);
          timer = setTimeout(
            () => reject(new FleetError('TIMEOUT', `no reply for request "${requestId}" within ${timeoutMs} ms (the reply inbox was not open yet)`, { details: { id: requestId, timeoutMs } })),
            waitMs,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
      if (failWait !== undefined) this.awaiting.delete(failWait);
    }
  }

  /** Opens the inbox once; a failed opening is forgotten, so a later call tries again. */
  opened(): Promise<void> {
    const ready = (this.ready ??= this.open().catch((err: unknown) => {
      this.ready = undefined;
      throw err;
    }));
    return ready;
  }

  private async open(): Promise<void> {
    const { admin } = await this.host.connect();
    this.refuseIfClosed();
    // Before the call: a creation that went through but answered with an error still gets deleted.
    this.created = true;
    const name = this.current;
    await ensureTopics(admin, [name], 1);
    this.refuseIfClosed();
    this.host.knownTopics.add(name);
    // A fresh topic read from its beginning: no reply can slip past before the group is joined.
    this.stopConsumer = await this.host.consume(name, `${name}.group`);
  }

  /** close() waits for an inbox being opened: each step of the opening ends it once closed. */
  private refuseIfClosed(): void {
    if (this.host.isClosed()) throw new FleetError('CLOSED', 'kafka producer is closed');
  }

  /** A reply that timed out makes the inbox look whether it was deleted (checkGone). */
  afterTimeoutCheck(reply: Promise<ResultEnvelope>): Promise<ResultEnvelope> {
    reply.catch((err: unknown) => {
      if (FleetError.is(err, 'TIMEOUT')) this.checkGone();
    });
    return reply;
  }

  /**
   * Why: an inbox topic deleted under a live producer (a cleanup of inbox topics taking it for a
   * dead client's) is gone for good to the workers, who send its results to {model}.replies; every
   * later request() of the producer timed out, silently and for ever. So after a timeout (at most
   * every INBOX_CHECK_MS, in the background: the timeout is not delayed) the inbox is looked for,
   * and when gone the next request opens a new one under a new name.
   */
  private checkGone(): void {
    const now = Date.now();
    const ready = this.ready;
    if (this.host.isClosed() || ready === undefined || this.check !== undefined || now - this.checkedAt < INBOX_CHECK_MS) return;
    this.checkedAt = now;
    const name = this.current;
    this.check = (async () => {
      await ready;
      const { admin } = await this.host.connect();
      // Missing twice 250 ms apart, as the workers judge an inbox gone: a broker's metadata can lag.
      if ((await admin.listTopics()).includes(name)) return;
      await new Promise((r) => setTimeout(r, 250));
      if ((await admin.listTopics()).includes(name) || this.host.isClosed() || this.current !== name || this.ready !== ready) return;
      this.host.logger?.warn({ inbox: name }, 'the reply inbox topic of this producer was deleted by someone else: its replies went elsewhere; later requests use a new inbox');
      this.current = privateInbox('kafka', this.host.clientId, this.host.replyPattern).name;
      this.ready = undefined;
      this.created = false;
      this.host.knownTopics.delete(name);
      const stop = this.stopConsumer;
      this.stopConsumer = undefined;
      if (stop !== undefined) await stop();
    })()
      .catch(() => undefined)
      .finally(() => {
        this.check = undefined;
      });
  }

  /**
   * The first part of the producer's close(): fails the request()s still waiting for the inbox, and
   * waits for an opening under way, which would otherwise create its topic or start its consumer
   * after the teardown and both would outlive the producer (it stops at its next step).
   */
  async closing(closedError: FleetError): Promise<void> {
    for (const fail of [...this.awaiting]) fail(closedError);
    this.awaiting.clear();
    await this.ready?.catch(() => undefined);
  }

  /** The last part of close(), its consumer stopped: deletes the inbox topic if it may exist. */
  async deleteTopic(admin: Admin): Promise<void> {
    if (this.created) await admin.deleteTopics({ topics: [this.current] }).catch(() => undefined);
  }
}
