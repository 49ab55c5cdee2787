// Cuts a Kafka client's produce traffic off from the real broker while its other traffic (group
// heartbeats, fetches, commits, metadata, admin) keeps flowing: what a worker sees when the
// leaders of its reply partitions are unreachable but its group coordinator is not.
import type { Socket } from 'node:net';
import type { ISocketFactory } from 'kafkajs';
import { produceSniffingFactory } from './produce-sniffer.ts';

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

  readonly socketFactory: ISocketFactory = produceSniffingFactory('ProduceOutage', (socket, produce, forward) => {
    if (this.silenced.has(socket)) return true;
    if (produce && this.mode !== undefined) {
      this.cut++;
      if (this.mode === 'reset') socket.destroy(Object.assign(new Error('read ECONNRESET (produce outage)'), { code: 'ECONNRESET' }));
      else {
        this.silenced.add(socket);
        socket.on('close', () => this.silenced.delete(socket));
      }
      return true;
    }
    return forward();
  });

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
