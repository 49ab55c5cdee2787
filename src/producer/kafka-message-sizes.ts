import type { Admin, Message } from 'kafkajs';
import { FleetError } from '../errors/fleet-error.ts';
import { topicMaxMessageBytes } from '../transport/kafka/fetch-size.ts';

/**
 * What the broker counts beyond a message's key, value and headers: a record batch's own header
 * (61 bytes) and the record's framing (length, attributes, deltas, key and value lengths: varints).
 */
const RECORD_FRAMING_BYTES = 128;

/**
 * Messages smaller than this are not checked, so the sends of small requests (load, frames, most
 * data sets) never wait for a DescribeConfigs; a topic configured below it still refuses them at
 * the broker, as before.
 */
const CHECKED_FROM_BYTES = 64 * 1024;

/** How long a topic's max.message.bytes is trusted: a limit raised on the broker is seen within this. */
const LIMIT_TTL_MS = 60_000;

/** One message of a send: `id` names it in the refusal (its key is its streamKey when it has one). */
export interface SizedMessage {
  readonly topic: string;
  readonly message: Message;
  readonly id?: string | undefined;
}

function byteLength(v: unknown): number {
  if (v === null || v === undefined) return 0;
  return typeof v === 'string' ? Buffer.byteLength(v) : (v as Buffer).length;
}

function wireBytes(message: Message): number {
  let bytes = byteLength(message.value) + byteLength(message.key) + RECORD_FRAMING_BYTES;
  if (message.headers !== undefined) for (const k in message.headers) bytes += Buffer.byteLength(k) + byteLength(message.headers[k]) + 8;
  return bytes;
}

/**
 * Refuses, before a send goes out, a message its topic's max.message.bytes (1 MiB on a default
 * broker) would refuse. The producer's own checks allow up to limits.maxMessageBytes (64 MiB):
 * such a request used to fail the produce request it went in, and with it the other requests of
 * that publish (some of which the broker had written), so `publish --file` stopped the whole run
 * instead of recording the one line invalid (bulkPublish sends each of a refused publish alone).
 */
export class KafkaMessageSizes {
  /** Per topic: its max.message.bytes (undefined: unreadable, not checked) and when it was read. */
  private readonly limits = new Map<string, { readonly maxBytes: number | undefined; readonly readAtMs: number }>();

  constructor(private readonly nowMs: () => number = Date.now) {}

  /**
   * Throws LIMIT_EXCEEDED for the first message over its topic's limit: details.index is its place
   * in `messages`, details.problem its problem alone (without which message, or that nothing was sent).
   */
  async check(admin: Admin, messages: readonly SizedMessage[]): Promise<void> {
    const sizes = messages.map((m) => wireBytes(m.message));
    const large = messages.filter((_, i) => (sizes[i] as number) >= CHECKED_FROM_BYTES);
    if (large.length === 0) return;
    const now = this.nowMs();
    const stale = [...new Set(large.map((m) => m.topic))].filter((t) => {
      const known = this.limits.get(t);
      return known === undefined || now - known.readAtMs >= LIMIT_TTL_MS;
    });
    if (stale.length > 0) await this.read(admin, stale, now);
    messages.forEach((m, index) => {
      const bytes = sizes[index] as number;
      const maxBytes = this.limits.get(m.topic)?.maxBytes;
      if (bytes < CHECKED_FROM_BYTES || maxBytes === undefined || bytes <= maxBytes) return;
      const what = m.id === undefined ? `message ${index}` : `request "${m.id}"`;
      const over =
        `${bytes} bytes on the wire, over max.message.bytes (${maxBytes}) of ${m.topic}, which the broker would refuse: ` +
        `send fewer samples per request, or raise that topic's max.message.bytes (kafka-configs.sh --alter --entity-type topics --entity-name ${m.topic} --add-config max.message.bytes=N)`;
      // details.problem: this message's problem alone (a caller sending a data set words one line's record from it).
      throw new FleetError('LIMIT_EXCEEDED', `${what} is ${over}; nothing of this publish was sent`, {
        details: { field: 'inputs', index, topic: m.topic, maxMessageBytes: maxBytes, bytes, problem: `it is ${over}` },
      });
    });
  }

  private async read(admin: Admin, topics: readonly string[], now: number): Promise<void> {
    let found = new Map<string, number>();
    try {
      found = await topicMaxMessageBytes(admin, topics);
    } catch {
      // DescribeConfigs refused (ACLs): the broker judges, as before this check.
    }
    for (const t of topics) this.limits.set(t, { maxBytes: found.get(t), readAtMs: now });
  }
}
