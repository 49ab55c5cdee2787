import type { Delivery, Transport } from '../../../src/transport/transport.ts';
import { idOf, outcomeFor } from './conformance-kit.ts';

/**
 * A stand-in device for transport drills that need work in flight: deliveries are held locally and
 * run in batches of `batch`, `deviceMs` each, one batch at a time, each batch's results settled as
 * it ends (a settle failing across an outage is left to the transport's redelivery). `served`
 * counts how often each request id ran; `held` is what waits locally now.
 */
export function batchingDevice(transport: Pick<Transport, 'settle'>, batch: number, deviceMs: number) {
  const served = new Map<string, number>();
  const local: Delivery[] = [];
  let running = false;
  const run = async (): Promise<void> => {
    if (running) return;
    running = true;
    try {
      while (local.length > 0) {
        const next = local.splice(0, batch);
        await new Promise((r) => setTimeout(r, deviceMs));
        for (const d of next) served.set(idOf(d), (served.get(idOf(d)) ?? 0) + 1);
        void transport.settle(next.map(outcomeFor)).catch(() => undefined);
      }
    } finally {
      running = false;
    }
  };
  return {
    served,
    held: (): number => local.length,
    onDeliveries: (ds: Delivery[]): void => {
      local.push(...ds);
      void run();
    },
  };
}
