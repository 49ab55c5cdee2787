import { randomUUID } from 'node:crypto';
import type { Admin, ConfigResourceTypes, IHeaders, Kafka, KafkaMessage, Message, Producer } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { FleetError } from '../../errors/fleet-error.ts';
import { checkQuery, inWindow, ListingBuilder, replayHeaders, replayTarget, ReplayTally, requestFacts, sourcePriority, type DeadLetter, type DeadLetterListing, type DeadLetterQuery, type DeadLetters, type ReplayOptions, type ReplayReport } from '../dead-letters.ts';
import { HEADERS, renderName } from '../names.ts';
import { createKafka, kafkaError, type TransportLogger } from './kafka-client.ts';
import { chunkByBytes, groupByTopic, type OutgoingMessage } from './kafka-outcomes.ts';

const STALL_MS = 30_000;
/**
 * Most records per produce request. Bytes are bounded too, below the request topics'
 * max.message.bytes: one fetch batch of a compressed DLQ can hold many times that once
 * decompressed, and the broker refuses an oversized record batch as a whole.
 */
const SEND_RECORDS = 500;
/** Bytes per produce request where the topics take the broker default (chunkByBytes' own: 1 MiB less a margin). */
const SEND_BYTES = 900 * 1024;
/** The broker's default message.max.bytes: assumed for a topic whose setting cannot be read. */
const DEFAULT_MAX_MESSAGE_BYTES = 1_048_588;
/** kafkajs' ConfigResourceTypes.TOPIC: its CommonJS exports name it in a way Node's ESM import cannot see. */
const TOPIC_RESOURCE = 2 as ConfigResourceTypes;
/** A v2 record batch's own header: with key, value and headers, a lower bound of a lone record's size. */
const BATCH_HEADER_BYTES = 61;

/** At least what `message` takes as a record batch of its own (the varints are left out). */
function leastBatchBytes(message: Message): number {
  const len = (v: unknown): number => (v === null || v === undefined ? 0 : typeof v === 'string' ? Buffer.byteLength(v) : (v as Buffer).length);
  let bytes = BATCH_HEADER_BYTES + len(message.key) + len(message.value);
  for (const [k, v] of Object.entries(message.headers ?? {})) bytes += Buffer.byteLength(k) + (Array.isArray(v) ? v.reduce<number>((n, x) => n + len(x), 0) : len(v));
  return bytes;
}

function headerText(v: IHeaders[string]): string | undefined {
  if (v === undefined) return undefined;
  const first = Array.isArray(v) ? v[0] : v;
  return first === undefined ? undefined : Buffer.isBuffer(first) ? first.toString('utf8') : String(first);
}

type Visit = (batch: Array<{ letter: DeadLetter; message: KafkaMessage }>) => Promise<boolean>;

/**
 * A model's Kafka DLQ topic (see DeadLetters). Each list/replay reads the partitions from the
 * first record at or after `sinceAt` (else the oldest retained) up to their end as of the start,
 * with a consumer group of its own (`npu-fleet-dlq-<uuid>`: the principal needs Read and Delete
 * on such groups) that commits nothing and is deleted afterwards, so it never moves anyone's
 * offsets. Replay re-sends the original key, value and headers (minus the DLQ's) to the topic in
 * the record's `npu-fleet-dlq-source`, with `npu-fleet-replay-of` added; the DLQ record stays (a
 * log is not edited). Sends fit each request topic's max.message.bytes (read with DescribeConfigs;
 * the broker default where that is refused), and a record over it is skipped. JS thread only.
 */
export class KafkaDeadLetters implements DeadLetters {
  private readonly kafka: Kafka;

  constructor(
    private readonly settings: KafkaSettings,
    logger?: TransportLogger,
    /** A read that makes no progress for this long (time spent re-sending not counted) has stalled. */
    private readonly stallMs = STALL_MS,
  ) {
    this.kafka = createKafka({ ...settings, clientId: `${settings.clientId}-dlq` }, logger, 3);
  }

  async list(query: DeadLetterQuery): Promise<DeadLetterListing> {
    checkQuery(query);
    const listing = new ListingBuilder(query);
    await this.scan(query, (batch) => {
      for (const { letter } of batch) listing.add(letter);
      return Promise.resolve(false);
    });
    return listing.build();
  }

  async replay(options: ReplayOptions): Promise<ReplayReport> {
    checkQuery(options);
    const tally = new ReplayTally(options);
    const producer: Producer | undefined = options.dryRun === true ? undefined : this.kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
    try {
      await producer?.connect().catch((err: unknown) => {
        throw kafkaError(err, 'connecting the replay producer failed; check transport.kafka.brokers');
      });
      // A send to a topic that does not exist, or over what it takes, fails the whole batch, and
      // with it the replay: such records (a priority the model no longer has, a deleted topic, a
      // limit lowered since) are skipped instead.
      const topics = await this.requestTopics(options.model);
      await this.scan(options, async (batch) => {
        const out: OutgoingMessage[] = [];
        let stop = false;
        for (const { letter, message } of batch) {
          if (!tally.read(letter)) continue;
          // Counts this batch's records too: tally.replayed grows only once the batch is sent.
          if (options.limit !== undefined && tally.replayed + out.length >= options.limit) {
            stop = true;
            break;
          }
          tally.matched++;
          // The topic is the priority on Kafka.
          const target = replayTarget(letter, { template: this.settings.topicTemplate, model: options.model, nowMs: Date.now(), priorityRequired: false });
          if ('why' in target) {
            tally.skipped.push({ ref: letter.ref, why: target.why });
            continue;
          }
          if (!topics.has(target.source)) {
            tally.skipped.push({ ref: letter.ref, why: `its source topic ${target.source} does not exist; create it (start a worker of ${options.model} serving that priority) and replay again` });
            continue;
          }
          const resend = { key: message.key, value: message.value, headers: replayHeaders(message.headers ?? {}, letter.ref) };
          const maxBytes = topics.get(target.source) ?? DEFAULT_MAX_MESSAGE_BYTES;
          const bytes = leastBatchBytes(resend);
          if (bytes > maxBytes) {
            tally.skipped.push({ ref: letter.ref, why: `it is ${bytes} bytes or more re-sent, over max.message.bytes (${maxBytes}) of ${target.source}; raise that topic's max.message.bytes and replay again` });
            continue;
          }
          out.push({ topic: target.source, message: resend });
        }
        if (producer === undefined) tally.replayed += out.length;
        else {
          // One chunk after another (in DLQ order), counted as each is acknowledged: a failure part
          // way reports what went out before it. Chunks fit the smallest limit of the batch's topics
          // (mostly all the broker default) with the margin chunkByBytes keeps below 1 MiB.
          const maxBytes = out.reduce((n, m) => Math.min(n, Math.floor((topics.get(m.topic) ?? DEFAULT_MAX_MESSAGE_BYTES) * 0.875)), SEND_BYTES);
          for (const bytesChunk of chunkByBytes(out, maxBytes)) {
            for (let i = 0; i < bytesChunk.length; i += SEND_RECORDS) {
              const chunk = bytesChunk.slice(i, i + SEND_RECORDS);
              await producer.sendBatch({ topicMessages: groupByTopic(chunk), acks: -1 });
              tally.replayed += chunk.length;
              tally.progress();
            }
          }
        }
        tally.progress();
        return stop;
      });
    } catch (err) {
      throw tally.failed(err, `replaying the DLQ of ${options.model} failed`);
    } finally {
      await producer?.disconnect().catch(() => undefined);
    }
    tally.progress(true);
    return tally.report();
  }

  async close(): Promise<void> {}

  /** The model's request topics that exist, each with the largest record batch it takes (max.message.bytes). */
  private async requestTopics(model: string): Promise<Map<string, number>> {
    const admin = this.kafka.admin();
    await admin.connect().catch((err: unknown) => {
      throw kafkaError(err, 'listing topics failed: no broker answered; check transport.kafka.brokers');
    });
    try {
      const names = (await admin.listTopics()).filter((t) => sourcePriority(this.settings.topicTemplate, model, t) !== null);
      const topics = new Map(names.map((t) => [t, DEFAULT_MAX_MESSAGE_BYTES]));
      if (names.length === 0) return topics;
      try {
        const { resources } = await admin.describeConfigs({
          includeSynonyms: false,
          resources: names.map((name) => ({ type: TOPIC_RESOURCE, name, configNames: ['max.message.bytes'] })),
        });
        for (const r of resources) {
          const maxBytes = Number(r.configEntries.find((e) => e.configName === 'max.message.bytes')?.configValue);
          if (r.errorCode === 0 && Number.isInteger(maxBytes) && maxBytes > 0) topics.set(r.resourceName, maxBytes);
        }
      } catch {
        // Not allowed to read topic configs (DescribeConfigs): the broker default is assumed, and a
        // topic set lower refuses a send, which fails the replay with the broker's error.
      }
      return topics;
    } catch (err) {
      throw kafkaError(err, 'listing topics failed');
    } finally {
      await admin.disconnect();
    }
  }

  /**
   * Feeds `visit` the DLQ records in fetch batches (per partition, in offset order) until every
   * partition reached its end as of the start or `visit` returns true.
   */
  private async scan(query: DeadLetterQuery, visit: Visit): Promise<void> {
    const topic = renderName(this.settings.dlqTemplate, query.model);
    const admin = this.kafka.admin();
    await admin.connect().catch((err: unknown) => {
      throw kafkaError(err, `reading the DLQ topic ${topic} failed: no broker answered; check transport.kafka.brokers`);
    });
    const groupId = `npu-fleet-dlq-${randomUUID()}`;
    try {
      const ranges = await this.ranges(admin, topic, query.sinceAt);
      if (ranges.size === 0) return;
      await this.consume(topic, groupId, ranges, query, visit);
    } finally {
      await admin.deleteGroups([groupId]).catch(() => undefined);
      await admin.disconnect();
    }
  }

  /** Per partition with records to read: [first offset, end offset) as of now. */
  private async ranges(admin: Admin, topic: string, sinceAt: number | undefined): Promise<Map<number, { from: number; end: number }>> {
    const ranges = new Map<number, { from: number; end: number }>();
    try {
      // listTopics reads metadata without naming the topic, so a broker with auto-create on does not create it.
      if (!(await admin.listTopics()).includes(topic)) return ranges;
      const ends = await admin.fetchTopicOffsets(topic);
      const starts = sinceAt === undefined ? undefined : await admin.fetchTopicOffsetsByTimestamp(topic, sinceAt);
      for (const e of ends) {
        const end = Number(e.high);
        const since = starts?.find((s) => s.partition === e.partition);
        // No record at or after sinceAt: the broker answers the end offset (or -1).
        const from = Math.max(Number(e.low), since === undefined ? 0 : Number(since.offset) < 0 ? end : Number(since.offset));
        if (from < end) ranges.set(e.partition, { from, end });
      }
    } catch (err) {
      throw kafkaError(err, `reading the offsets of DLQ topic ${topic} failed`);
    }
    return ranges;
  }

  private async consume(topic: string, groupId: string, ranges: Map<number, { from: number; end: number }>, query: DeadLetterQuery, visit: Visit): Promise<void> {
    const consumer = this.kafka.consumer({ groupId, allowAutoTopicCreation: false, maxWaitTimeInMs: 500 });
    const open = new Set(ranges.keys());
    // Per partition, the next offset not yet visited: a rejoin restarts from the oldest offset,
    // and what was visited before must not be visited (re-sent) again.
    const next = new Map([...ranges].map(([p, r]) => [p, r.from]));
    let lastProgressAt = Date.now();
    // Re-sending may take a while (broker retries, slow acks): that is progress, not a stall, and
    // the producer's own timeouts bound it.
    let visiting = 0;
    let failure: unknown;
    let finish: () => void = () => undefined;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const fail = (err: unknown): void => {
      failure ??= err;
      finish();
    };
    const stalled = setInterval(() => {
      if (visiting > 0 || Date.now() - lastProgressAt < this.stallMs) return;
      fail(new FleetError('TIMEOUT', `reading DLQ topic ${topic} made no progress for ${this.stallMs / 1000} s (${open.size} partition(s) unfinished); check transport.kafka.brokers`, { retriable: true }));
    }, 1_000);
    try {
      // Partitions close on this event, not in eachBatch: kafkajs skips eachBatch for a batch
      // holding only control records (exactlyOnce writes them), which may end a range.
      consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
        const range = ranges.get(payload.partition);
        if (payload.topic !== topic || range === undefined || Number(payload.lastOffset) < range.end - 1) return;
        lastProgressAt = Date.now();
        open.delete(payload.partition);
        if (open.size === 0) finish();
      });
      // kafkajs does not restart a consumer the broker refused for good (ACLs on the group): say so now.
      consumer.on(consumer.events.CRASH, ({ payload }) => {
        if (!payload.restart) fail(kafkaError(payload.error, `reading DLQ topic ${topic} failed (group ${groupId}: its principal needs Read and Delete on npu-fleet-dlq-* groups)`));
      });
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachBatch: async ({ batch }) => {
          const range = ranges.get(batch.partition);
          if (range === undefined || !open.has(batch.partition) || failure !== undefined) return;
          const from = next.get(batch.partition) ?? range.from;
          const items: Array<{ letter: DeadLetter; message: KafkaMessage }> = [];
          for (const message of batch.messages) {
            const offset = Number(message.offset);
            if (offset < from || offset >= range.end) continue;
            next.set(batch.partition, offset + 1);
            const letter = letterOf(topic, batch.partition, message, (source) => sourcePriority(this.settings.topicTemplate, query.model, source) ?? undefined);
            if (inWindow(letter, query)) items.push({ letter, message });
          }
          visiting++;
          try {
            if (await visit(items)) {
              open.clear();
              finish();
            }
          } catch (err) {
            fail(err);
          } finally {
            visiting--;
            lastProgressAt = Date.now();
          }
        },
      });
      for (const [partition, { from }] of ranges) consumer.seek({ topic, partition, offset: String(from) });
      await finished;
    } finally {
      clearInterval(stalled);
      await consumer.disconnect().catch(() => undefined);
    }
    if (failure !== undefined) throw FleetError.from(failure, 'TRANSPORT_ERROR');
  }
}

function letterOf(topic: string, partition: number, message: KafkaMessage, priorityOf: (source: string) => number | undefined): DeadLetter {
  const headers = message.headers ?? {};
  // "topic/partition/offset"; Kafka topic names have no '/'.
  const source = headerText(headers[HEADERS.dlqSource])?.split('/')[0] || undefined;
  const value = message.value ?? Buffer.alloc(0);
  const facts = requestFacts(value);
  return {
    ref: `${topic}/${partition}/${message.offset}`,
    reason: headerText(headers[HEADERS.dlqReason]) ?? '',
    message: headerText(headers[HEADERS.dlqMessage]) ?? '',
    source,
    priority: source === undefined ? undefined : priorityOf(source),
    requestId: facts.requestId ?? headerText(headers[HEADERS.requestId]),
    deadlineAt: facts.deadlineAt,
    deadAt: Number(message.timestamp),
    bytes: value.byteLength,
  };
}
