// Cuts a Kafka client's produce traffic off from the real broker while its other traffic (group
// heartbeats, fetches, commits, metadata, admin) keeps flowing: what a worker sees when the
// leaders of its reply partitions are unreachable but its group coordinator is not.
import { connect, type Socket } from 'node:net';
import type { ISocketFactory } from 'kafkajs';

/** Kafka's api key of a Produce request. */
const PRODUCE_API_KEY = 0;

export type OutageMode =
  /** The connection is reset as a Produce request is written: sends fail fast, kafkajs retries. */
  | 'reset'
  /** The connection goes silent from its first Produce request on: the send waits for an answer. */
  | 'blackhole';

/**
 * A kafkajs socket factory: real TCP connections to the real broker, each watching the requests
 * written on it (4-byte size, then the api key). Connections are not told apart by client: a
 * consumer or an admin never writes Produce, so only producer connections are cut.
 */
export class ProduceOutage {
  private mode: OutageMode | undefined;
  private readonly silenced = new Set<Socket>();
  /** Produce requests that met the outage. */
  cut = 0;

  readonly socketFactory: ISocketFactory = ({ host, port, ssl, onConnect }) => {
    if (ssl) throw new Error('ProduceOutage: plaintext listeners only');
    const socket = connect({ host, port }, onConnect);
    const write = socket.write.bind(socket) as (chunk: Uint8Array, encoding?: unknown, cb?: unknown) => boolean;
    let pending = Buffer.alloc(0);
    socket.write = ((chunk: Uint8Array | string, encoding?: unknown, cb?: unknown): boolean => {
      if (this.silenced.has(socket)) return true;
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'binary') : Buffer.from(chunk);
      pending = Buffer.concat([pending, bytes]);
      // Frames may span writes (kafkajs writes one request per call, but do not rely on it).
      let produce = false;
      while (pending.length >= 6) {
        if (pending.readInt16BE(4) === PRODUCE_API_KEY) produce = true;
        const size = 4 + pending.readInt32BE(0);
        if (pending.length < size) break;
        pending = pending.subarray(size);
      }
      if (produce && this.mode !== undefined) {
        this.cut++;
        if (this.mode === 'reset') socket.destroy(Object.assign(new Error('read ECONNRESET (produce outage)'), { code: 'ECONNRESET' }));
        else this.silenced.add(socket);
        return true;
      }
      return write(bytes, encoding, cb);
    }) as typeof socket.write;
    socket.on('close', () => this.silenced.delete(socket));
    return socket;
  };

  start(mode: OutageMode): void {
    this.mode = mode;
  }

  /**
   * Ends the outage. Silenced connections are reset, as a long partition ends for TCP: kafkajs
   * fails their requests and retries on fresh connections.
   */
  stop(): void {
    this.mode = undefined;
    for (const socket of this.silenced) socket.destroy(Object.assign(new Error('read ECONNRESET (produce outage over)'), { code: 'ECONNRESET' }));
    this.silenced.clear();
  }

  /** For closeAfterEach: a failed test must not leave sends hanging on a silenced connection. */
  async close(): Promise<void> {
    this.stop();
  }
}
