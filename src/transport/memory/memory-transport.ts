import { FleetError } from '../../errors/fleet-error.ts';
import { closedError, DeliveryLedger, notOpenError } from '../delivery-ledger.ts';
import { HEADERS, MEMORY_NAMES, renderName, replyToProblem } from '../names.ts';
import type { Delivery, Outcome, Transport, TransportStartOptions } from '../transport.ts';
import { encodeResultFor } from '../wire.ts';
import { sharedMemoryBroker, type MemoryBroker, type MemoryConsumer, type MemoryMessage, type MemorySend } from './memory-broker.ts';

export interface MemoryTransportOptions {
  /** Defaults to the process-wide broker (what the embedded fleet and its producers share). */
  readonly broker?: MemoryBroker;
  /** Most unsettled deliveries held per model (the broker stops handing out more). */
  readonly prefetch?: number;
}

interface Entry {
  readonly message: MemoryMessage;
  readonly consumer: MemoryConsumer;
}

/**
 * Transport over the in-process MemoryBroker: request queue `{model}.requests` with priority
 * lanes, replies to `replyTo` or `{model}.replies`, DLQ `{model}.dlq` (original bytes, reason in
 * headers). Same contract as the real brokers, so the runtime and the conformance suite cannot
 * tell the difference.
 */
export class MemoryTransport implements Transport {
  readonly kind = 'memory' as const;
  readonly broker: MemoryBroker;
  private readonly prefetch: number | undefined;
  private readonly consumers = new Map<string, MemoryConsumer>();
  private readonly ledger = new DeliveryLedger<Entry>();
  private closed = false;
  private started = false;

  constructor(options: MemoryTransportOptions = {}) {
    this.broker = options.broker ?? sharedMemoryBroker();
    this.prefetch = options.prefetch;
  }

  async start(options: TransportStartOptions): Promise<void> {
    if (this.closed) throw closedError(this.kind);
    for (const { model } of options.subscriptions) {
      if (this.consumers.has(model)) continue;
      const queue = renderName(MEMORY_NAMES.requests, model);
      const consumer = this.broker.consume(
        queue,
        (messages) => options.onDeliveries(messages.map((m) => this.toDelivery(model, m, consumer))),
        this.prefetch === undefined ? {} : { prefetch: this.prefetch },
      );
      this.consumers.set(model, consumer);
    }
    this.started = true;
  }

  pause(model: string, priorities: readonly number[]): void {
    this.consumers.get(model)?.pause(priorities);
  }

  resume(model: string, priorities: readonly number[]): void {
    this.consumers.get(model)?.resume(priorities);
  }

  settle(outcomes: readonly Outcome[]): Promise<void> {
    return this.ledger.guard(
      outcomes.map((o) => o.delivery.deliveryId),
      () => this.settleNow(outcomes),
    );
  }

  private async settleNow(outcomes: readonly Outcome[]): Promise<void> {
    const { claimed, rejected } = this.ledger.claim(outcomes.map((o) => ({ deliveryId: o.delivery.deliveryId, outcome: o })));
    let failure: unknown;
    for (const { item, entry } of claimed) {
      const { outcome } = item;
      try {
        this.publish(outcome, entry.message);
        entry.consumer.ack([entry.message.id]);
        this.ledger.finish(item.deliveryId);
      } catch (err) {
        this.ledger.unclaim(item.deliveryId);
        failure ??= err;
      }
    }
    if (failure !== undefined) throw FleetError.from(failure, 'TRANSPORT_ERROR');
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  private publish(outcome: Outcome, message: MemoryMessage): void {
    const model = outcome.delivery.model;
    const replyTo = outcome.replyTo ?? renderName(MEMORY_NAMES.replies, model);
    // A reply destination no queue can have: the request goes to the DLQ instead (as on Kafka and
    // BullMQ), rather than a send that fails the same way on every retry.
    const problem = replyToProblem('memory', replyTo);
    const dlqReason = outcome.dlq ?? (problem === undefined ? undefined : { reason: 'INVALID_ARGUMENT', message: `replyTo ${problem}` });
    if (dlqReason !== undefined) {
      const dlq: MemorySend = {
        body: message.body,
        key: message.key,
        headers: {
          ...message.headers,
          [HEADERS.dlqReason]: dlqReason.reason,
          [HEADERS.dlqMessage]: dlqReason.message,
          [HEADERS.dlqSource]: message.id,
          [HEADERS.dlqPriority]: String(message.priority),
        },
      };
      this.broker.send(renderName(MEMORY_NAMES.dlq, model), [dlq]);
    }
    if (problem !== undefined) return;
    const { bytes, contentType } = encodeResultFor(message.body, outcome.result);
    this.broker.send(replyTo, [
      { body: bytes, key: message.key, headers: { [HEADERS.contentType]: contentType, [HEADERS.requestId]: outcome.result.id } },
    ]);
  }

  async release(deliveries: readonly Delivery[]): Promise<void> {
    const { claimed, rejected } = this.ledger.claim(deliveries);
    for (const { item, entry } of claimed) {
      entry.consumer.requeue([entry.message.id]);
      this.ledger.finish(item.deliveryId);
    }
    if (rejected.length > 0) throw notOpenError(rejected);
  }

  async markSuspect(deliveries: readonly Delivery[]): Promise<boolean> {
    this.broker.markSuspect(deliveries.map((d) => d.deliveryId));
    return true;
  }

  async stopIntake(): Promise<void> {
    for (const c of this.consumers.values()) c.stop();
  }

  /** Waits for settles in flight, gives back whatever is still unsettled, detaches. */
  connected(): boolean {
    return this.started && !this.closed;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.stopIntake();
    await this.ledger.quiesce();
    this.closed = true;
    for (const c of this.consumers.values()) c.close();
    this.consumers.clear();
    for (const [id] of this.ledger.entries()) this.ledger.forget(id);
  }

  /** Simulates a crash: drop everything at once; the broker redelivers unacked messages. */
  async abort(): Promise<void> {
    this.closed = true;
    for (const c of this.consumers.values()) c.close();
    this.consumers.clear();
    for (const [id] of this.ledger.entries()) this.ledger.forget(id);
  }

  async sourceLag(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const model of this.consumers.keys()) out[model] = this.broker.depth(renderName(MEMORY_NAMES.requests, model));
    return out;
  }

  private toDelivery(model: string, message: MemoryMessage, consumer: MemoryConsumer): Delivery {
    const delivery: Delivery = {
      deliveryId: message.id,
      model,
      priority: message.priority,
      body: message.body,
      receivedAt: Date.now(),
      redelivered: message.deliveryCount > 0,
      suspectCount: message.deliveryCount > 0 ? this.broker.suspectCount(message.id) : 0,
    };
    this.ledger.add(message.id, { message, consumer });
    return delivery;
  }
}
