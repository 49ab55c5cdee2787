import type { IHeaders, Message, TopicMessages } from 'kafkajs';
import { HEADERS, isPrivateInbox, replyToProblem, type ReplyTopicPattern } from '../names.ts';
import type { Outcome } from '../transport.ts';
import { encodeResultFor } from '../wire.ts';

/** What the transport keeps of a consumed message until it is settled. */
export interface KafkaSource {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly key: Buffer | null;
  readonly headers: IHeaders | undefined;
  readonly value: Buffer;
}

export interface OutgoingMessage {
  readonly topic: string;
  readonly message: Message;
  /**
   * Sent instead when `topic`, a request() client's private inbox, is gone (the client closed
   * before its results): the same result on the model's replies topic, saying so in a header.
   * Never set on a DLQ record.
   */
  readonly orElse?: OutgoingMessage;
}

export interface Names {
  replies(model: string): string;
  dlq(model: string): string;
  /**
   * Put content-type and request id headers on results. Off by default: kafkajs header encoding
   * costs as much as the rest of the produce path (measured ~+50 % per send), and the payload is
   * self-describing (a frame starts with "NPUF", JSON with '{') and carries the id.
   */
  readonly resultHeaders?: boolean;
  /** transport.kafka.replyTopicPattern: a replyTo a request names must match it. */
  readonly replyPattern?: ReplyTopicPattern;
}

/**
 * The messages one outcome produces: its result (to replyTo, else `{model}.replies`, keyed like
 * the request so a stream stays on one partition) and, when asked, a DLQ record carrying the
 * original bytes and headers plus the reason. A replyTo Kafka cannot hold is itself a defect of
 * the request: the request goes to the DLQ instead of failing the whole publish batch forever.
 */
export function messagesFor(outcome: Outcome, source: KafkaSource, names: Names, options: { readonly dropDlqValue?: boolean } = {}): OutgoingMessage[] {
  const model = outcome.delivery.model;
  const out: OutgoingMessage[] = [];
  const replyTo = outcome.replyTo ?? names.replies(model);
  let dlq = outcome.dlq;
  // The model's own replies topic is the fleet's: only a name a request chose is held to the pattern.
  const problem = replyToProblem('kafka', replyTo, outcome.replyTo === undefined ? undefined : names.replyPattern);
  if (problem !== undefined) {
    dlq ??= { reason: 'INVALID_ARGUMENT', message: `replyTo ${problem}` };
  } else {
    const { bytes, contentType } = encodeResultFor(source.value, outcome.result);
    const key = source.key ?? outcome.result.id;
    const ids = { [HEADERS.contentType]: contentType, [HEADERS.requestId]: outcome.result.id };
    // Only a client's own inbox may be gone for good: other names are created on first use.
    const orElse: OutgoingMessage | undefined =
      outcome.replyTo === undefined || !isPrivateInbox(replyTo)
        ? undefined
        : {
            topic: names.replies(model),
            message: {
              key,
              value: bytes,
              headers: { ...ids, [HEADERS.replyToGone]: `${replyTo}: the request() client's inbox was deleted (the client closed) before this result` },
            },
          };
    out.push({
      topic: replyTo,
      message: { key, value: bytes, ...(names.resultHeaders === true ? { headers: ids } : {}) },
      ...(orElse === undefined ? {} : { orElse }),
    });
  }
  if (dlq !== undefined) {
    const topic = names.dlq(model);
    const where = `${source.topic}/${source.partition}/${source.offset}`;
    // The broker refused the record with the original bytes (a request topic may take bigger
    // messages than the DLQ topic): the record still says what and why, and where the bytes are.
    const dropped =
      options.dropDlqValue === true
        ? {
            [HEADERS.dlqValueDropped]:
              `${source.value.length} bytes not kept: over the message size limit of ${topic}; the original stays at ${where} ` +
              `until that topic's retention (raise max.message.bytes of ${topic} to keep such requests)`,
          }
        : {};
    out.push({
      topic,
      message: {
        key: source.key,
        value: options.dropDlqValue === true ? Buffer.alloc(0) : source.value,
        headers: {
          ...source.headers,
          [HEADERS.dlqReason]: dlq.reason,
          [HEADERS.dlqMessage]: dlq.message.slice(0, 1024),
          [HEADERS.dlqSource]: where,
          ...dropped,
        },
      },
    });
  }
  return out;
}

export function groupByTopic(messages: readonly OutgoingMessage[]): TopicMessages[] {
  const byTopic = new Map<string, Message[]>();
  for (const { topic, message } of messages) {
    const list = byTopic.get(topic) ?? [];
    list.push(message);
    byTopic.set(topic, list);
  }
  return [...byTopic].map(([topic, msgs]) => ({ topic, messages: msgs }));
}

/**
 * Splits messages into sends that the broker accepts: kafkajs puts everything for a partition
 * into one record batch, and a batch over the broker's message.max.bytes (1 MiB by default) is
 * refused as a whole. Order is kept (chunks are sent one after another).
 */
export function chunkByBytes<T extends { message: Message }>(messages: readonly T[], maxBytes = 900 * 1024): T[][] {
  const chunks: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const m of messages) {
    const size = sizeOf(m.message);
    if (current.length > 0 && bytes + size > maxBytes) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(m);
    bytes += size;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

// Module level, not a closure in sizeOf: the tsx loader keeps function names (esbuild keepNames), so a
// closure made per call costs an Object.defineProperty each time, ~1 µs per result in the CPU profile.
function byteLen(v: unknown): number {
  return v === null || v === undefined ? 0 : typeof v === 'string' ? Buffer.byteLength(v) : (v as Buffer).length;
}

function sizeOf(message: Message): number {
  let headers = 0;
  if (message.headers !== undefined) for (const k in message.headers) headers += k.length + byteLen(message.headers[k]) + 8;
  return byteLen(message.value) + byteLen(message.key) + headers + 32;
}

/**
 * `messages` as the produce requests they go in: those for each request() client's private inbox
 * in one of their own, the others together, in the order of each request's first message (a
 * topic's messages keep their order). A client deletes its inbox when it closes, also with results
 * still due to it, and kafkajs keeps retrying a produce request naming a deleted topic whose other
 * partitions the broker wrote: the send is then given up and its messages go again (see
 * ResultSender), and only what shared no request with the inbox is known to be written or not.
 * One request (the same array) when all are for one inbox or none is: nearly every send.
 */
export function apartByInbox<T extends { readonly topic: string }>(messages: readonly T[]): ReadonlyArray<readonly T[]> {
  // A request's key: its inbox, or '' for the shared one. isPrivateInbox once per run of one topic.
  let lastTopic: string | undefined;
  let lastKey = '';
  let only: string | undefined;
  let mixed = false;
  for (const m of messages) {
    if (m.topic !== lastTopic) {
      lastTopic = m.topic;
      lastKey = isPrivateInbox(m.topic) ? m.topic : '';
    }
    if (only === undefined) only = lastKey;
    else if (lastKey !== only) {
      mixed = true;
      break;
    }
  }
  if (!mixed) return [messages];
  const parts = new Map<string, T[]>();
  lastTopic = undefined;
  for (const m of messages) {
    if (m.topic !== lastTopic) {
      lastTopic = m.topic;
      lastKey = isPrivateInbox(m.topic) ? m.topic : '';
    }
    const part = parts.get(lastKey);
    if (part === undefined) parts.set(lastKey, [m]);
    else part.push(m);
  }
  return [...parts.values()];
}
