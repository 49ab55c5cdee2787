// Holds a Kafka client's produce traffic back while its group traffic (heartbeats, fetches,
// rebalances, commits) flows: results "being published" for as long as a test needs, as when a
// broker is slow to acknowledge them. Nothing is lost: held requests go out in order on open().
import { connect, type Socket } from 'node:net';
import type { ISocketFactory } from 'kafkajs';

/** Kafka's api key of a Produce request. */
const PRODUCE_API_KEY = 0;

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

  readonly socketFactory: ISocketFactory = ({ host, port, ssl, onConnect }) => {
    if (ssl) throw new Error('ProduceGate: plaintext listeners only');
    const socket = connect({ host, port }, onConnect);
    const write = socket.write.bind(socket) as (chunk: Uint8Array, encoding?: unknown, cb?: unknown) => boolean;
    let pending = Buffer.alloc(0);
    socket.write = ((chunk: Uint8Array | string, encoding?: unknown, cb?: unknown): boolean => {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'binary') : Buffer.from(chunk);
      pending = Buffer.concat([pending, bytes]);
      let produce = false;
      while (pending.length >= 6) {
        if (pending.readInt16BE(4) === PRODUCE_API_KEY) produce = true;
        const size = 4 + pending.readInt32BE(0);
        if (pending.length < size) break;
        pending = pending.subarray(size);
      }
      let h = this.held.get(socket);
      if (h === undefined && produce && this.shut) this.held.set(socket, (h = { socket, writes: [] }));
      if (h === undefined) return write(bytes, encoding, cb);
      if (produce) this.producesHeld++;
      h.writes.push(() => void write(bytes, encoding, cb));
      return true;
    }) as typeof socket.write;
    socket.on('close', () => this.held.delete(socket));
    return socket;
  };

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
