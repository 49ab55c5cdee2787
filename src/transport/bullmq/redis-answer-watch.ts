import type { Redis } from 'ioredis';
import type { TransportLogger } from '../kafka/kafka-client.ts';

/** How often a PING goes out on the worker's shared connection when none is unanswered. */
export const ANSWER_PING_INTERVAL_MS = 1_000;

/** The longest a command may go unanswered before the worker turns unready, whatever connectTimeoutMs says. */
export const ANSWER_BOUND_MAX_MS = 5_000;

export interface RedisAnswerWatchOptions {
  /** The connection to ask; undefined or not 'ready' is no PING (connected() says that case already). */
  readonly redis: () => Redis | undefined;
  /** A PING unanswered this long makes the worker unready. */
  readonly unansweredMs: number;
  readonly intervalMs?: number;
  readonly now?: () => number;
  readonly logger?: TransportLogger | undefined;
}

/**
 * Whether Redis answers commands. A redis-server frozen (SIGSTOP, a hung host, a paused VM)
 * keeps its connections open: ioredis stays 'ready' and the worker looked ready for the whole
 * freeze, while every command it sent waited. One PING at a time goes out every interval on the
 * shared connection (behind whatever else is queued on it, so it also tells of commands waiting
 * there); one unanswered past `unansweredMs` makes unanswered() say for how long, until Redis
 * answers it. JS thread only.
 */
export class RedisAnswerWatch {
  private timer: NodeJS.Timeout | undefined;
  /** When the PING now waiting for its answer went out. */
  private pendingSinceMs: number | undefined;
  private saidUnanswered = false;
  private readonly now: () => number;

  constructor(private readonly o: RedisAnswerWatchOptions) {
    this.now = o.now ?? Date.now;
  }

  start(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => this.tick(), this.o.intervalMs ?? ANSWER_PING_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.pendingSinceMs = undefined;
  }

  /** How long the PING waiting for Redis has waited, once past the bound; undefined while Redis answers. */
  unansweredForMs(): number | undefined {
    if (this.pendingSinceMs === undefined) return undefined;
    const waitedMs = this.now() - this.pendingSinceMs;
    if (waitedMs < this.o.unansweredMs) return undefined;
    if (!this.saidUnanswered) {
      this.saidUnanswered = true;
      this.o.logger?.warn({ waitedMs, boundMs: this.o.unansweredMs }, 'Redis does not answer (a PING unanswered past the bound; a frozen or overloaded server?): worker unready until it does');
    }
    return waitedMs;
  }

  private tick(): void {
    // Checked here too, so the warning comes when it happens rather than at the next /readyz.
    this.unansweredForMs();
    if (this.pendingSinceMs !== undefined) return;
    const redis = this.o.redis();
    if (redis === undefined || redis.status !== 'ready') return;
    const sentAt = this.now();
    this.pendingSinceMs = sentAt;
    const answered = (): void => {
      // A stop() (or a later PING) since: not this one's to clear.
      if (this.pendingSinceMs !== sentAt) return;
      this.pendingSinceMs = undefined;
      if (this.saidUnanswered) {
        this.saidUnanswered = false;
        this.o.logger?.info({ waitedMs: this.now() - sentAt }, 'Redis answers again: worker ready');
      }
    };
    // A rejection (the connection closed under it) is an answer of sorts: connected() tells that case.
    redis.ping().then(answered, answered);
  }
}
