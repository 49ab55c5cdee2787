import type { Logger } from '../observability/logger.ts';
import type { Delivery, Transport } from '../transport/transport.ts';
import type { CrashHint, InflightJournal } from './inflight-journal.ts';

/**
 * Most of a dead predecessor's requests carried on in the journal while they have not come back
 * (those that went to another worker never do): the first ones, from its batches in flight.
 */
const MAX_CARRIED_HINTS = 1000;
/**
 * How long a hint waits for its request: a crashed request comes back within a lock duration
 * (BullMQ) or a rebalance (Kafka), at the head of its partition. Later, it went to another worker
 * and was answered there, and a new job of the same id (BullMQ jobId = request id: a replay of its
 * DLQ record, a producer's retry) must not be taken for it.
 */
const HINT_TTL_MS = 30 * 60_000;

/** One batch in flight: whether it carries a suspect, and its journal entry (JSON of [delivery id, suspect count] pairs). */
export interface JournaledBatch {
  readonly suspect: boolean;
  readonly json: string;
}

/**
 * The worker's side of crash handling (see InflightJournal): the batches in flight, journaled as
 * they start and finish; whether one carries a suspect (it then has the device to itself, so a
 * crash blames it alone); and the hints a dead predecessor left, applied as those deliveries come
 * back. JS thread only.
 */
export class CrashSuspects {
  private readonly batches: JournaledBatch[] = [];
  private readonly hints: Map<string, CrashHint>;
  private suspectBatches = 0;
  /** Hinted deliveries being recorded with the broker before admission. */
  private recording = 0;
  /** After a hang: the journal's batches from then on (the hung one, or none once the broker has it). */
  private afterHang: string[] | undefined;
  /** When this worker found its predecessor's hints (those it carries on from further back say their own). */
  private readonly startedAt = Date.now();

  constructor(
    private readonly o: {
      readonly journal?: InflightJournal | undefined;
      readonly hints?: ReadonlyMap<string, CrashHint> | undefined;
      readonly transport: Pick<Transport, 'markSuspect'>;
      readonly log: Logger;
    },
  ) {
    this.hints = new Map(o.hints);
    // takeCrashHints emptied the journal: until they come back, the hints live in this process
    // alone, and a worker killed meanwhile (a second crash, a SIGKILL) would lose their count.
    if (this.hints.size > 0) this.record();
  }

  /** A batch carrying a suspect is on the device: nothing else may join it. */
  get suspectOnDevice(): boolean {
    return this.suspectBatches > 0;
  }

  /** Hinted deliveries not yet admitted (the worker is not idle while there are some). */
  get pending(): number {
    return this.recording;
  }

  /** A batch goes to the device; the handle is for finished(). */
  started(deliveries: readonly Delivery[]): JournaledBatch {
    const suspect = deliveries.some((d) => (d.suspectCount ?? 0) > 0);
    // No journal (the memory broker): nothing to serialize on the way to the device.
    const batch = { suspect, json: this.o.journal === undefined ? '' : JSON.stringify(deliveries.map((d) => [d.deliveryId, d.suspectCount ?? 0])) };
    this.batches.push(batch);
    if (batch.suspect) this.suspectBatches++;
    this.record();
    return batch;
  }

  /** A batch left the device; `journal` false once a hang took over (the journal is cleared). */
  finished(batch: JournaledBatch, journal: boolean): void {
    this.batches.splice(this.batches.indexOf(batch), 1);
    if (batch.suspect) this.suspectBatches--;
    // The next batch in flight heads the journal now.
    if (journal) this.record();
  }

  /** The end of a drain: empty, or a batch still on the device past the drain timeout. */
  record(): void {
    // A suspect batch waits for the batches ahead of it to leave the device (BatchRunner): until
    // then a crash is theirs, and it is journaled only once it heads the batches in flight.
    this.write(this.afterHang ?? this.batches.filter((b, i) => i === 0 || !b.suspect).map((b) => b.json));
  }

  /**
   * The batch on the device (of `model`) hung: its requests are recorded with the broker as
   * suspects. Until the broker holds them, the journal keeps that batch alone (the others were
   * only waiting behind it), marked hung (see CrashHint.hung); where the broker cannot keep the
   * counts (Kafka exactlyOnce), recording fails or holds only some (partitions revoked meanwhile),
   * it stays there and the next worker of this device counts those the broker does not hold, as
   * after a crash. Settles once recorded (or given up on); never rejects.
   */
  hung(deliveries: readonly Delivery[], model: string): Promise<void> {
    this.afterHang = [JSON.stringify(deliveries.map((d) => [d.deliveryId, d.suspectCount ?? 0, 1]))];
    this.record();
    const kept = 'the batches that were in flight are kept in the in-flight journal: the next worker of this device counts them';
    return this.o.transport.markSuspect(deliveries).then(
      (recorded) => {
        // Recorded with the broker: the journal must not count them a second time.
        if (recorded) this.clear();
        else this.o.log.warn({ model, suspects: deliveries.length }, `the broker does not hold device-hang counts here; ${kept}`);
      },
      (err: unknown) => this.o.log.error({ err, model }, `could not record the hung batch's requests as suspects; ${kept}`),
    );
  }

  /** A hang was recorded with the broker: the next worker must not count it a second time. */
  clear(): void {
    this.afterHang = [];
    this.record();
  }

  private expired(hint: CrashHint): boolean {
    return Date.now() - (hint.foundAt ?? this.startedAt) > HINT_TTL_MS;
  }

  /**
   * The journal: `batches`, then, as one more entry, the predecessor's requests that have not come
   * back yet, as it left them (their crash is still to be counted, once, by whichever worker of
   * this device gets them).
   */
  private write(inFlight: readonly string[]): void {
    if (this.o.journal === undefined) return;
    const batches = [...inFlight];
    if (this.hints.size > 0) {
      const carried: unknown[] = [];
      for (const [id, hint] of this.hints) {
        if (carried.length === MAX_CARRIED_HINTS) break;
        if (!this.expired(hint)) carried.push([id, hint.suspectCount, hint.hung ? 1 : 0, hint.foundAt ?? this.startedAt]);
      }
      if (carried.length > 0) batches.push(JSON.stringify(carried));
    }
    this.o.journal.record(batches);
  }

  /**
   * When `delivery` was on the device as the previous worker of this device died: resolves to it
   * as a suspect (one more than the broker's count or the journal's, whichever is higher) once the
   * broker has recorded it, before it runs, for it may kill this worker too; undefined otherwise.
   * After a hang the broker may have recorded already (its count above the journal's): that count
   * stands, or one hang would count twice and quarantine the batch's innocent requests with it.
   */
  take(delivery: Delivery): Promise<Delivery> | undefined {
    const hint = this.hints.size > 0 ? this.hints.get(delivery.deliveryId) : undefined;
    if (hint === undefined) return undefined;
    this.hints.delete(delivery.deliveryId);
    if (this.expired(hint)) return undefined;
    // Counted from here on (by the broker, and journaled with its batch): not carried any more.
    this.record();
    const brokerCount = delivery.suspectCount ?? 0;
    if (hint.hung && brokerCount > hint.suspectCount) return Promise.resolve(delivery);
    const suspect = { ...delivery, suspectCount: Math.max(brokerCount, hint.suspectCount) + 1 };
    this.o.log.warn({ deliveryId: delivery.deliveryId, suspectCount: suspect.suspectCount }, 'request was on the device when the previous worker of this device died: counted as a suspect');
    this.recording++;
    return this.o.transport
      .markSuspect([delivery])
      .catch((err: unknown) => this.o.log.error({ err }, 'could not record a crash suspect with the broker; the journal still counts it here'))
      .then(() => {
        this.recording--;
        return suspect;
      });
  }
}
