import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import type { FleetError } from '../errors/fleet-error.ts';

/**
 * The one interface every transport implements (DESIGN §3), written in queue terms. The shared
 * conformance suite (test/integration/transport/conformance.ts) runs unchanged against each one.
 *
 * Flow: the transport hands deliveries to `onDeliveries` and returns at once (it never waits for
 * the device); the runtime decodes, schedules, executes and finally calls `settle` with one
 * outcome per delivery. `settle` publishes each result (and DLQ record) durably and only then
 * acknowledges the delivery (Kafka: commits the contiguous completed prefix per partition;
 * BullMQ: completes the job with the result as its return value).
 */
export interface Delivery {
  /** Transport-unique id of this delivery (e.g. `topic/partition/offset`, BullMQ job id). */
  readonly deliveryId: string;
  /** Model the request was addressed to (from the topic/queue name). */
  readonly model: string;
  /** Priority implied by the source (Kafka topic per priority, BullMQ job priority), if any. */
  readonly priority: number | undefined;
  /** Raw message: bytes (binary frame or JSON text) or, for BullMQ, the job's JSON data. */
  readonly body: Uint8Array | Record<string, unknown>;
  /** Epoch ms when the transport received it. */
  readonly receivedAt: number;
  /** True when the broker says this was delivered before (redelivery after a crash). */
  readonly redelivered: boolean;
  /**
   * How many times it was on a device when that device hung (recorded by `markSuspect`, kept by
   * the broker across worker restarts); absent or 0: never.
   */
  readonly suspectCount?: number | undefined;
}

export interface DlqRecord {
  /** Stable reason code (FleetError code, e.g. INVALID_MESSAGE). */
  readonly reason: string;
  readonly message: string;
}

export interface Outcome {
  readonly delivery: Delivery;
  /** Published to `replyTo` (else the model's default reply topic/queue). */
  readonly result: ResultEnvelope;
  readonly replyTo?: string | undefined;
  /** When set, the original bytes also go to the model's DLQ with this reason. */
  readonly dlq?: DlqRecord | undefined;
}

export interface ModelSubscription {
  readonly model: string;
  readonly priorityLevels: number;
}

export interface TransportStartOptions {
  readonly subscriptions: readonly ModelSubscription[];
  /** Called on the event loop; must not block. */
  readonly onDeliveries: (deliveries: Delivery[]) => void;
  /**
   * The transport can no longer receive work and will not recover by itself (a Kafka consumer
   * the broker refused for good, a BullMQ worker loop that stopped). Called at most once, on the
   * event loop; the worker drains what it holds and exits so its supervisor restarts it.
   */
  readonly onFatal?: (err: FleetError) => void;
  /**
   * The transport answered a request on its own, with a `failed` result and a DLQ record (BullMQ:
   * a job BullMQ gave up on after its workers died holding it, see stall-reaper.ts), so the
   * worker's metrics count it like its own dead letters. Called on the event loop.
   */
  readonly onAnswered?: (model: string, dlqReason: string) => void;
  /**
   * These open deliveries now belong to another worker (Kafka: their partition moved in a
   * rebalance), which reads and answers them again: the runtime drops those it has not started
   * and releases them; those already on a device settle as usual. Called on the event loop; never
   * for deliveries a settle is publishing.
   */
  readonly onRevoked?: (deliveryIds: ReadonlySet<string>) => void;
  /**
   * The note the previous worker process of this device left, handed over only if it is dead, and
   * where to leave this one's. A BullMQ transport notes its workers' ids, so the next worker puts
   * back at once the jobs a dead one held instead of leaving them until their locks lapse
   * (`lockDurationMs`: minutes); a Kafka transport notes its consumer-group member, so the next
   * worker removes a dead one from the group instead of waiting out `sessionTimeoutMs`. Absent:
   * nothing is kept (the memory broker, tests).
   */
  readonly predecessor?: PredecessorNote;
}

export interface PredecessorNote {
  readonly previous: string | undefined;
  /** Small, best effort; replaces the previous note. */
  save(note: string): void;
}

export interface SettleOptions {
  /**
   * Called (at most once) when all that is left of this settle is waiting for a reply destination
   * to be created (Kafka: a reply topic new to the broker, ~150 ms+ each): the caller need not count
   * it against its concurrent settles any more, so settles behind it are not held by creations.
   * `waitsForOthers`: what is left also waits for other settles (Kafka exactly-once: a transaction
   * takes a partition's contiguous settled prefix only), so holding a slot those need would hang
   * both for good. Kafka exactly-once calls it so on every settle once its results are placed for
   * their transactions, creations or not (what is left waits for transactions, which may wait for
   * an earlier offset the caller has not settled yet); the transport's in-flight bounds bound how
   * many such settles exist. The promise still resolves only once everything is published and
   * acknowledged.
   */
  readonly onWaitingForCreation?: (waitsForOthers: boolean) => void;
}

/** A stream frame about to be answered `ok` (model `streams.superseded: drop`): see Transport.claimNewestFrames. */
export interface AnsweredFrame {
  readonly model: string;
  readonly requestId: string;
  readonly streamKey: string;
  /** Its createdAt: epoch ms on the producer's clock, strictly increasing per stream. */
  readonly frameAt: number;
}

/** The frame of a stream answered `ok` before an older one: the older one is superseded. */
export interface NewerFrame {
  readonly requestId: string;
  readonly frameAt: number;
}

/** What Transport.claimNewestFrames decided, per frame in order. */
export interface FrameClaim {
  /** undefined: claimed, answer it `ok`; else the newer frame of its stream, answered first. */
  readonly newer: ReadonlyArray<NewerFrame | undefined>;
  /** The settle that followed ended (published, or failed): its streams are free for the next claim. Call once. */
  release(): void;
}

export interface Transport {
  readonly kind: 'kafka' | 'bullmq' | 'memory';
  start(options: TransportStartOptions): Promise<void>;
  /** Backpressure: stop fetching the given priorities of a model (lowest priorities first). */
  pause(model: string, priorities: readonly number[]): void;
  resume(model: string, priorities: readonly number[]): void;
  /** Publish results (+DLQ records) durably, then acknowledge their deliveries. */
  settle(outcomes: readonly Outcome[], options?: SettleOptions): Promise<void>;
  /** Give unprocessed deliveries back to the broker (shutdown); they will be redelivered. */
  release(deliveries: readonly Delivery[]): Promise<void>;
  /**
   * These deliveries were on the device when it hung (the worker is about to exit): record that
   * with the broker, so whoever receives one next sees its `suspectCount` one higher. Neither
   * settles nor releases them. A poison request that hangs every device it reaches is caught this
   * way instead of crash-looping the fleet. Resolves true once the broker holds the counts, false
   * when this transport cannot keep them (Kafka in exactlyOnce mode) or no longer holds some of
   * the deliveries: the caller then keeps its own record (the worker's in-flight journal).
   */
  markSuspect(deliveries: readonly Delivery[]): Promise<boolean>;
  /**
   * For a transport whose workers share a stream (BullMQ: a camera's frames go to whichever worker
   * fetches them; Kafka has none, a stream's partition is read by one worker): called with the
   * stream frames of a settle that are about to be answered `ok`, before that settle. Each frame
   * not older than the newest of its stream claimed anywhere in the fleet in the last
   * SERVED_FRAME_MEMORY_MS becomes the newest (undefined in its place); an older one gets that
   * newer frame, and the caller answers it superseded instead. Frames are taken in order: the
   * later of two of a stream in one call is compared with the earlier. Until the claim's release
   * (the caller's settle ended), a claim of a newer frame of its streams waits: published first,
   * it would overtake. Never rejects: when the broker cannot tell (away, slow), every frame comes
   * back undefined and is answered `ok`.
   */
  claimNewestFrames?(frames: readonly AnsweredFrame[]): Promise<FrameClaim>;
  /** Stop fetching new work; settle still works. */
  stopIntake(): Promise<void>;
  /**
   * Whether the broker answers, as far as the client can tell without a round trip (a readiness
   * probe calls it on every request): Kafka, a heartbeat or fetch within a few heartbeat
   * intervals (the contact window, at least 5 s), and results getting out: false while result
   * sends have been attempted without one succeeding for longer than that window (reply leaders
   * unreachable while the group coordinator answers), true again at the next success; a producer
   * with nothing to send counts as fine. BullMQ, every Redis connection up; memory, not closed.
   * False before start() and after close(). JS thread; never throws.
   */
  connected(): boolean;
  /**
   * Why connected() is false, when the transport can say better than "broker unreachable" (Kafka:
   * its request consumer outside its group, restarting); undefined otherwise. JS thread; never throws.
   */
  unreadyReason?(): string | undefined;
  close(): Promise<void>;
  /** Work waiting at the source per model (Kafka consumer lag, BullMQ waiting count). */
  sourceLag(): Promise<Record<string, number>>;
}
