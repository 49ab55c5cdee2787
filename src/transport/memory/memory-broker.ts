import { FleetError } from '../../errors/fleet-error.ts';
import { Deque } from './deque.ts';

/**
 * An in-process message broker with the semantics the fleet relies on from Kafka and BullMQ:
 * named queues with priority lanes (0 first, FIFO within a lane), a bounded number of unacked
 * messages per consumer (prefetch), ack after processing, and redelivery of every unacked message
 * when its consumer closes or crashes. It is the embedded default for `npm start` and the
 * broker of unit tests; it lives in one process and keeps nothing on disk.
 */
export interface MemoryMessage {
  /** Broker-assigned, increasing: also the FIFO order within a lane. */
  readonly id: string;
  readonly seq: number;
  readonly body: Uint8Array;
  readonly priority: number;
  readonly key: string | undefined;
  readonly headers: Readonly<Record<string, string>>;
  readonly enqueuedAt: number;
  /** How many times this message was handed to a consumer before this delivery. */
  readonly deliveryCount: number;
}

export interface MemorySend {
  readonly body: Uint8Array;
  readonly priority?: number | undefined;
  readonly key?: string | undefined;
  readonly headers?: Readonly<Record<string, string>> | undefined;
}

export interface MemoryConsumerOptions {
  /** Most unacked messages this consumer holds at once. */
  readonly prefetch?: number;
  /** Ack on delivery (reply readers). */
  readonly autoAck?: boolean;
}

/** Kafka's legal topic characters; the broker rejects anything else like a real one would. */
const QUEUE_NAME = /^[A-Za-z0-9._-]{1,249}$/;
const DEFAULT_PREFETCH = 1024;

export class MemoryConsumer {
  readonly queue: string;
  private readonly unacked = new Map<string, MemoryMessage>();
  private readonly paused = new Set<number>();
  private stopped = false;
  private closed = false;

  constructor(
    private readonly broker: MemoryBroker,
    queue: string,
    readonly onMessages: (messages: MemoryMessage[]) => void,
    readonly prefetch: number,
    readonly autoAck: boolean,
  ) {
    this.queue = queue;
  }

  get unackedCount(): number {
    return this.unacked.size;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Capacity for new messages and which lanes it accepts. */
  wants(): { capacity: number; accepts: (priority: number) => boolean } {
    const capacity = this.stopped || this.closed ? 0 : Math.max(0, this.prefetch - this.unacked.size);
    return { capacity, accepts: (p) => !this.paused.has(p) };
  }

  /** Called by the broker with messages it removed from the queue for this consumer. */
  take(messages: MemoryMessage[]): void {
    if (!this.autoAck) for (const m of messages) this.unacked.set(m.id, m);
    this.onMessages(messages);
  }

  pause(priorities: readonly number[]): void {
    for (const p of priorities) this.paused.add(p);
  }

  resume(priorities: readonly number[]): void {
    for (const p of priorities) this.paused.delete(p);
    this.broker.schedule();
  }

  /** Stop receiving; acks and requeues still work. */
  stop(): void {
    this.stopped = true;
  }

  ack(ids: readonly string[]): void {
    for (const id of ids) this.unacked.delete(id);
    this.broker.forgetSuspects(ids);
    this.broker.schedule();
  }

  /** Give messages back to the queue head; they are redelivered (deliveryCount + 1). */
  requeue(ids: readonly string[]): void {
    const back: MemoryMessage[] = [];
    for (const id of ids) {
      const m = this.unacked.get(id);
      if (m === undefined) continue;
      this.unacked.delete(id);
      back.push(m);
    }
    this.broker.putBack(this.queue, back);
  }

  /** Detach; every unacked message returns to the queue (what a crashed consumer leaves behind). */
  close(): void {
    if (this.closed) return;
    this.requeue([...this.unacked.keys()]);
    this.closed = true;
    this.broker.detach(this);
  }
}

class Queue {
  readonly lanes = new Map<number, Deque<MemoryMessage>>();
  /** Lane priorities, ascending (0 first). */
  order: number[] = [];
  readonly consumers: MemoryConsumer[] = [];
  nextConsumer = 0;
  size = 0;

  lane(priority: number): Deque<MemoryMessage> {
    let lane = this.lanes.get(priority);
    if (lane === undefined) {
      lane = new Deque<MemoryMessage>();
      this.lanes.set(priority, lane);
      this.order = [...this.lanes.keys()].sort((a, b) => a - b);
    }
    return lane;
  }
}

export class MemoryBroker {
  private readonly queues = new Map<string, Queue>();
  private seq = 0;
  private scheduled = false;
  /** Fault injection for tests: sends to these queues throw. */
  private readonly failing = new Set<string>();
  /** Per message id: times it was on a device that hung (see Transport.markSuspect). */
  private readonly suspects = new Map<string, number>();

  markSuspect(messageIds: readonly string[]): void {
    for (const id of messageIds) this.suspects.set(id, (this.suspects.get(id) ?? 0) + 1);
  }

  suspectCount(messageId: string): number {
    return this.suspects.get(messageId) ?? 0;
  }

  /** Acked messages are gone for good: so is their count. */
  forgetSuspects(messageIds: readonly string[]): void {
    if (this.suspects.size === 0) return;
    for (const id of messageIds) this.suspects.delete(id);
  }

  send(queue: string, messages: readonly MemorySend[]): void {
    checkName(queue);
    if (this.failing.has(queue)) {
      throw new FleetError('TRANSPORT_ERROR', `memory broker: sends to "${queue}" are failing (fault injection)`, {
        details: { queue },
      });
    }
    const q = this.queue(queue);
    const now = Date.now();
    for (const m of messages) {
      const seq = ++this.seq;
      const priority = m.priority ?? 0;
      q.lane(priority).push({
        id: `${queue}#${seq}`,
        seq,
        body: m.body,
        priority,
        key: m.key,
        headers: { ...m.headers },
        enqueuedAt: now,
        deliveryCount: 0,
      });
      q.size++;
    }
    if (q.consumers.length > 0) this.schedule();
  }

  consume(queue: string, onMessages: (messages: MemoryMessage[]) => void, options: MemoryConsumerOptions = {}): MemoryConsumer {
    checkName(queue);
    const consumer = new MemoryConsumer(this, queue, onMessages, options.prefetch ?? DEFAULT_PREFETCH, options.autoAck ?? false);
    this.queue(queue).consumers.push(consumer);
    this.schedule();
    return consumer;
  }

  /** Messages waiting (not handed to any consumer). */
  depth(queue: string): number {
    return this.queues.get(queue)?.size ?? 0;
  }

  /** Waiting messages in delivery order, without consuming them. */
  peek(queue: string): MemoryMessage[] {
    const q = this.queues.get(queue);
    if (q === undefined) return [];
    return q.order.flatMap((p) => q.lanes.get(p)?.toArray() ?? []);
  }

  /** Removes and returns every waiting message (tests, DLQ inspection). */
  drain(queue: string): MemoryMessage[] {
    const out = this.peek(queue);
    this.queues.get(queue)?.lanes.clear();
    const q = this.queues.get(queue);
    if (q !== undefined) {
      q.order = [];
      q.size = 0;
    }
    return out;
  }

  /** Takes these waiting messages out of the queue (DLQ replay); returns how many were there. */
  remove(queue: string, ids: readonly string[]): number {
    const q = this.queues.get(queue);
    if (q === undefined || ids.length === 0) return 0;
    const gone = new Set(ids);
    let removed = 0;
    for (const [priority, lane] of q.lanes) {
      const kept = lane.toArray().filter((m) => !gone.has(m.id));
      if (kept.length === lane.length) continue;
      removed += lane.length - kept.length;
      const fresh = new Deque<MemoryMessage>();
      for (const m of kept) fresh.push(m);
      q.lanes.set(priority, fresh);
    }
    q.size -= removed;
    return removed;
  }

  failSends(queue: string, failing = true): void {
    if (failing) this.failing.add(queue);
    else this.failing.delete(queue);
  }

  /** Internal: a consumer gives messages back; they go to the head of their lanes in order. */
  putBack(queue: string, messages: readonly MemoryMessage[]): void {
    if (messages.length === 0) return;
    const q = this.queue(queue);
    const sorted = [...messages].sort((a, b) => b.seq - a.seq);
    for (const m of sorted) {
      q.lane(m.priority).unshift({ ...m, deliveryCount: m.deliveryCount + 1 });
      q.size++;
    }
    this.schedule();
  }

  detach(consumer: MemoryConsumer): void {
    const q = this.queues.get(consumer.queue);
    if (q === undefined) return;
    const i = q.consumers.indexOf(consumer);
    if (i >= 0) q.consumers.splice(i, 1);
  }

  /** Dispatch on a later tick so one burst of sends becomes one delivery batch per consumer. */
  schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      for (const q of this.queues.values()) this.dispatch(q);
    });
  }

  private dispatch(q: Queue): void {
    // A snapshot: a consumer callback may close consumers while we iterate.
    const consumers = [...q.consumers];
    const n = consumers.length;
    if (n === 0 || q.size === 0) return;
    // Round robin, a bounded slice per consumer per turn, so consumers share a backlog.
    const slice = 256;
    let progressed = true;
    while (progressed && q.size > 0) {
      progressed = false;
      for (let k = 0; k < n && q.size > 0; k++) {
        const consumer = consumers[(q.nextConsumer + k) % n];
        if (consumer === undefined || consumer.isClosed) continue;
        const { capacity, accepts } = consumer.wants();
        const batch: MemoryMessage[] = [];
        const limit = Math.min(capacity, slice);
        for (const p of q.order) {
          if (batch.length >= limit) break;
          if (!accepts(p)) continue;
          const lane = q.lanes.get(p);
          while (lane !== undefined && lane.length > 0 && batch.length < limit) batch.push(lane.shift() as MemoryMessage);
        }
        if (batch.length > 0) {
          q.size -= batch.length;
          progressed = true;
          consumer.take(batch);
        }
      }
      q.nextConsumer = (q.nextConsumer + 1) % n;
    }
  }

  private queue(name: string): Queue {
    let q = this.queues.get(name);
    if (q === undefined) {
      q = new Queue();
      this.queues.set(name, q);
    }
    return q;
  }
}

function checkName(queue: string): void {
  if (!QUEUE_NAME.test(queue)) {
    throw new FleetError('INVALID_ARGUMENT', `memory broker: "${queue}" is not a valid queue name (use [A-Za-z0-9._-], 1..249 chars)`, {
      details: { queue },
    });
  }
}

let shared: MemoryBroker | undefined;

/** The process-wide broker used when no broker is passed (embedded fleet, demo producers). */
export function sharedMemoryBroker(): MemoryBroker {
  shared ??= new MemoryBroker();
  return shared;
}
