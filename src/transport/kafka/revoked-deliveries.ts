import type { DeliveryLedger } from '../delivery-ledger.ts';

/**
 * At a rebalance, the open deliveries of the partitions this worker lost that no settle is
 * publishing right now: the runtime drops those it has not started and releases them
 * (TransportStartOptions.onRevoked), since the partition's new owner reads them again from the
 * committed offset and answers them; serving them here too would spend the device twice on the
 * same requests, at scale-out when it can least afford it. Those already on a device settle as
 * before (at-least-once: a second answer; exactly-once: skipped).
 */
export function revokedDeliveries<E extends { readonly part: P }, P>(ledger: DeliveryLedger<E>, revoked: ReadonlySet<P>): Set<string> {
  const ids = new Set<string>();
  if (revoked.size === 0) return ids;
  for (const [id, entry] of ledger.idleEntries()) if (revoked.has(entry.part)) ids.add(id);
  return ids;
}
