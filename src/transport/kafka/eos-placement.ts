import type { FleetError } from '../../errors/fleet-error.ts';
import type { EosPayload } from './kafka-eos.ts';
import type { OutgoingMessage } from './kafka-outcomes.ts';
import type { PartitionTracker } from './partition-tracker.ts';

/** An open delivery as the transport holds it: the tracker is its partition's latest assignment's. */
export interface PlaceableDelivery {
  readonly source: { readonly offset: number };
  readonly tracker: PartitionTracker<EosPayload>;
}

export interface PlacementHooks {
  /** Whether its partition is still this worker's, in the assignment that delivered it last. */
  readonly holds: () => boolean;
  /** A transaction may have something new to take. */
  readonly kick: () => void;
  /** Done with it (written, or left to the partition's new owner). */
  readonly finish: () => void;
  /** Not written: it stays open, to be settled again or released. */
  readonly unclaim: () => void;
}

/**
 * Settles an exactly-once delivery into its partition's tracker, where a transaction takes it
 * with the offsets that cover it; resolves once written (or left to a new owner). A partition can
 * be revoked and come back to this worker before a transaction wrote it: the delivery then
 * belongs to the new assignment's tracker (KafkaTransport.onBatch), so it is placed again there
 * instead of dropped, and when the old assignment's transaction did write it, the new tracker
 * commits past it with nothing left to write.
 */
export function placeForTransaction(entry: PlaceableDelivery, messages: readonly OutgoingMessage[], o: PlacementHooks): Promise<void> {
  const offset = entry.source.offset;
  return new Promise<void>((resolve, reject) => {
    const done = (): void => {
      o.finish();
      resolve();
    };
    const place = (): void => {
      const placedIn = entry.tracker;
      placedIn.settle(offset, {
        messages,
        resolve: () => {
          if (entry.tracker !== placedIn && entry.tracker.settle(offset)) o.kick();
          done();
        },
        dropped: () => {
          if (entry.tracker === placedIn || !o.holds()) return done();
          place();
          o.kick();
        },
        reject: (error: FleetError) => {
          placedIn.unsettle(offset);
          o.unclaim();
          reject(error);
        },
      });
    };
    place();
  });
}
