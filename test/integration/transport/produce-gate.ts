// Holds a Kafka client's produce traffic back while its group traffic (heartbeats, fetches,
// rebalances, commits) flows: results "being published" for as long as a test needs, as when a
// broker is slow to acknowledge them. Nothing is lost: held requests go out in order on open().
import type { Socket } from 'node:net';
import type { ISocketFactory } from 'kafkajs';
import { produceSniffingFactory } from './produce-sniffer.ts';

interface Held {
  readonly socket: Socket;
  readonly writes: Array<() => void>;
}

/**
 * A kafkajs socket factory: real TCP connections to the real broker. While the gate is shut, a
 * connection that writes a Produce request holds it and everything it writes after it (requests
 * on a connection stay in order); open() lets them go. A consumer or an admin never writes
 * Produce, so only producer connections are held.
 */
export class ProduceGate {
  private shut = false;
  private readonly held = new Map<Socket, Held>();
  /** Produce requests held so far. */
  producesHeld = 0;

  readonly socketFactory: ISocketFactory = produceSniffingFactory('ProduceGate', (socket, produce, forward) => {
    let h = this.held.get(socket);
    if (h === undefined && produce && this.shut) {
      this.held.set(socket, (h = { socket, writes: [] }));
      socket.on('close', () => this.held.delete(socket));
    }
    if (h === undefined) return forward();
    if (produce) this.producesHeld++;
    h.writes.push(() => void forward());
    return true;
  });

  /** From now on produce requests wait. */
  shutGate(): void {
    this.shut = true;
  }

  /** Held requests go out, in order; later ones pass straight through. */
  open(): void {
    this.shut = false;
    const held = [...this.held.values()];
    this.held.clear();
    for (const h of held) for (const w of h.writes) w();
  }

  /** For closeAfterEach: a failed test must not leave requests held. */
  async close(): Promise<void> {
    this.open();
  }
}
