import type { TransportLogger } from '../kafka/kafka-client.ts';
import type { Delivery } from '../transport.ts';

/**
 * BullMQ fetches jobs one by one (each its own processor call), while the runtime batches what it
 * is handed at once: deliveries are handed over together, on the next turn of the event loop.
 */
export class DeliveryBatcher {
  private pending: Delivery[] = [];
  private flushScheduled = false;

  constructor(
    private readonly handOver: (batch: Delivery[]) => void,
    private readonly logger: TransportLogger | undefined,
  ) {}

  add(delivery: Delivery): void {
    this.pending.push(delivery);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      const batch = this.pending;
      this.pending = [];
      if (batch.length === 0) return;
      try {
        this.handOver(batch);
      } catch (err) {
        this.logger?.error({ err }, 'onDeliveries threw; its deliveries stay unacked until settled or released');
      }
    });
  }
}
