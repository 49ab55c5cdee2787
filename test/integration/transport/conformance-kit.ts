// Building blocks of the transport conformance suite: request factories, a stand-in for the
// runtime (decode → outcome) and a collector of deliveries.
import { decodeRequest, requestFromJson } from '../../../src/codec/index.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import type { Producer } from '../../../src/producer/producer.ts';
import type { DeadLetters } from '../../../src/transport/dead-letters.ts';
import type { Delivery, Outcome, Transport } from '../../../src/transport/transport.ts';

export interface ConformanceHarness {
  readonly name: string;
  /** A consumer-side transport (a new "worker" each call), not started. */
  createTransport(): Transport;
  createProducer(): Producer;
  /** Kills a transport the way a crash would: no ack, no commit, no release. */
  crash(transport: Transport): Promise<void>;
  /** The same broker's dead-letter reader (DLQ list/replay). */
  createDeadLetters(): DeadLetters;
  /** True when a replayed DLQ record stays in the DLQ (Kafka: a log is not edited). */
  readonly deadLettersStay: boolean;
  /** DLQ records of a model, waiting until at least `count` arrived. */
  readDlq(model: string, count: number, timeoutMs: number): Promise<DlqEntry[]>;
  /** A replyTo name the broker refuses, so publishing a result there fails. */
  readonly unpublishableReplyTo: string;
  /** Garbage in the broker's native body form (bytes, or job data for BullMQ). */
  readonly garbage: Uint8Array | Record<string, unknown>;
  /** Time a crashed consumer's work may take to come back (lock expiry, group rebalance). */
  readonly redeliveryTimeoutMs: number;
  /**
   * True when exactly the unacked messages come back after a crash. Kafka redelivers from the
   * committed offset of each partition, so it may also repeat settled messages behind a gap.
   */
  readonly exactRedelivery: boolean;
  /** True when Delivery.redelivered is reliable after a crash (Kafka: best effort, false). */
  readonly redeliveredFlag: boolean;
  cleanup(): Promise<void>;
}

export interface DlqEntry {
  readonly reason: string;
  readonly message: string;
  /** The original message: bytes, or the original job data for BullMQ. */
  readonly body: Uint8Array | Record<string, unknown>;
}

export const PRIORITY_LEVELS = 3;

export function makeRequest(model: string, id: string, priority: number, extra: Partial<RequestEnvelope> = {}): RequestEnvelope {
  const data = new Uint8Array(new Float32Array([priority, 1.5, -2]).buffer);
  return {
    id,
    model,
    priority,
    createdAt: Date.now(),
    inputs: [{ name: 'x', dtype: 'float32', shape: [1, 3], data }],
    meta: { n: id },
    ...extra,
  };
}

/** What the runtime would decide for a delivery: echo the input as output, or `invalid` + DLQ. */
export function outcomeFor(delivery: Delivery): Outcome {
  try {
    const request = decodeBody(delivery);
    const result: ResultEnvelope = {
      id: request.id,
      model: request.model,
      version: '1',
      status: 'ok',
      outputs: request.inputs.map((t) => ({ ...t, name: 'y' })),
      timings: ZERO_TIMINGS,
      batchSize: 1,
      gear: 1,
      device: 0,
      worker: 'conformance',
      meta: request.meta,
    };
    return { delivery, result, replyTo: request.replyTo };
  } catch (err) {
    const e = FleetError.from(err, 'INVALID_MESSAGE');
    const result: ResultEnvelope = {
      id: '',
      model: delivery.model,
      version: '',
      status: 'invalid',
      error: e.toResultError(),
      timings: ZERO_TIMINGS,
      batchSize: 0,
      gear: 0,
      device: -1,
      worker: 'conformance',
    };
    return { delivery, result, dlq: { reason: e.code, message: e.message } };
  }
}

export function decodeBody(delivery: Delivery): RequestEnvelope {
  return delivery.body instanceof Uint8Array ? decodeRequest(delivery.body) : requestFromJson(delivery.body);
}

export function idOf(delivery: Delivery): string {
  return decodeBody(delivery).id;
}

/** Collects deliveries handed to onDeliveries and lets a test wait for them. */
export class Inbox {
  readonly all: Delivery[] = [];
  private waiters: Array<() => void> = [];

  readonly onDeliveries = (deliveries: Delivery[]): void => {
    this.all.push(...deliveries);
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  };

  async waitFor(count: number, timeoutMs: number): Promise<Delivery[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.all.length < count) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`waited ${timeoutMs} ms for ${count} deliveries, got ${this.all.length}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 200));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return this.all.slice(0, count);
  }

  /** Waits `ms` and returns what arrived meanwhile (to show nothing does). */
  async quietFor(ms: number): Promise<Delivery[]> {
    const before = this.all.length;
    await sleep(ms);
    return this.all.slice(before);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Collects results from a reply subscription. */
export class ResultSink {
  readonly results: ResultEnvelope[] = [];
  readonly onResult = (r: ResultEnvelope): void => {
    this.results.push(r);
  };

  async waitFor(count: number, timeoutMs: number): Promise<ResultEnvelope[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.results.length < count) {
      if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${count} results, got ${this.results.length}`);
      await sleep(20);
    }
    return this.results;
  }
}

export async function startWith(transport: Transport, model: string, inbox: Inbox): Promise<void> {
  await transport.start({ subscriptions: [{ model, priorityLevels: PRIORITY_LEVELS }], onDeliveries: inbox.onDeliveries });
}
