import { connect, type Socket } from 'node:net';
import type { ISocketFactory } from 'kafkajs';

/** Kafka's api key of a Produce request. */
const PRODUCE_API_KEY = 0;

/** Sends `bytes` on to the broker as the socket would have. */
export type Forward = () => boolean;

/**
 * A kafkajs socket factory: real TCP connections to the real broker, each watching the requests
 * written on it (4-byte size, then the api key; a request may span writes). `watch` is asked of
 * each request a write carries (part of), with its bytes so far (`whole` once they have all come);
 * `onWrite` decides what happens to the write, told whether `watch` said yes to any of them.
 */
export function requestSniffingFactory(
  owner: string,
  watch: (request: Buffer, whole: boolean) => boolean,
  onWrite: (socket: Socket, watched: boolean, forward: Forward) => boolean,
): ISocketFactory {
  return ({ host, port, ssl, onConnect }) => {
    if (ssl) throw new Error(`${owner}: plaintext listeners only`);
    const socket = connect({ host, port }, onConnect);
    const write = socket.write.bind(socket) as (chunk: Uint8Array, encoding?: unknown, cb?: unknown) => boolean;
    let pending = Buffer.alloc(0);
    socket.write = ((chunk: Uint8Array | string, encoding?: unknown, cb?: unknown): boolean => {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'binary') : Buffer.from(chunk);
      pending = Buffer.concat([pending, bytes]);
      let watched = false;
      while (pending.length >= 6) {
        const size = 4 + pending.readInt32BE(0);
        const whole = pending.length >= size;
        if (watch(whole ? pending.subarray(0, size) : pending, whole)) watched = true;
        if (!whole) break;
        pending = pending.subarray(size);
      }
      return onWrite(socket, watched, () => write(bytes, encoding, cb));
    }) as typeof socket.write;
    return socket;
  };
}

/**
 * requestSniffingFactory watching for Produce requests: a consumer or an admin never writes
 * Produce, so only producer connections are ever treated apart.
 */
export function produceSniffingFactory(owner: string, onWrite: (socket: Socket, produce: boolean, forward: Forward) => boolean): ISocketFactory {
  return requestSniffingFactory(owner, (request) => request.readInt16BE(4) === PRODUCE_API_KEY, onWrite);
}
