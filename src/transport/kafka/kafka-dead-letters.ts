import { randomUUID } from 'node:crypto';
import type { Admin, IHeaders, Kafka, KafkaMessage, Message, Producer } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { FleetError } from '../../errors/fleet-error.ts';
import { checkQuery, ListingBuilder, ReplayTally, requestIdOf, sourcePriority, type DeadLetter, type DeadLetterListing, type DeadLetterQuery, type DeadLetters, type ReplayOptions, type ReplayReport } from '../dead-letters.ts';
import { HEADERS, renderName } from '../names.ts';
import { createKafka, kafkaError, type TransportLogger } from './kafka-client.ts';

/** A read that makes no progress for this long has stalled (broker gone, topic deleted). */
const STALL_MS = 30_000;

function headerText(v: IHeaders[string]): string | undefined {
  if (v === undefined) return undefined;
  const first = Array.isArray(v) ? v[0] : v;
  return first === undefined ? undefined : Buffer.isBuffer(first) ? first.toString('utf8') : String(first);
}

/**
 * A model's Kafka DLQ topic (see DeadLetters). Each list/replay reads the partitions from the
 * first record at or after `sinceAt` (else the oldest retained) up to their end as of the start,
 * with a consumer group of its own that commits nothing and is deleted afterwards, so it never
 * moves anyone's offsets. Replay re-sends the original key, value and headers (minus the DLQ's)
 * to the topic in the record's `npu-fleet-dlq-source`, with `npu-fleet-replay-of` added; the
 * DLQ record stays (a log is not edited). JS thread only.
 */
export class KafkaDeadLetters implements DeadLetters {
  private readonly kafka: Kafka;

  constructor(
    private readonly settings: KafkaSettings,
    private readonly logger?: TransportLogger,
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
    await producer?.connect();
    try {
      await this.scan(options, async (batch) => {
        const out = new Map<string, Message[]>();
        let stop = false;
        for (const { letter, message } of batch) {
          if (!tally.read(letter)) continue;
          if (tally.full) {
            stop = true;
            break;
          }
          tally.matched++;
          if (letter.source === undefined || sourcePriority(this.settings.topicTemplate, options.model, letter.source) === null) {
            tally.skipped.push({ ref: letter.ref, why: `its source ${letter.source ?? '(none recorded)'} is not a request topic of ${options.model}` });
            continue;
          }
          tally.replayed++;
          const headers: IHeaders = { [HEADERS.replayOf]: letter.ref };
          for (const [k, v] of Object.entries(message.headers ?? {})) if (!k.startsWith('npu-fleet-dlq-') && v !== undefined) headers[k] = v;
          const list = out.get(letter.source) ?? [];
          list.push({ key: message.key, value: message.value, headers });
          out.set(letter.source, list);
        }
        if (producer !== undefined && out.size > 0) {
          const sending = [...out.values()].reduce((n, l) => n + l.length, 0);
          try {
            await producer.sendBatch({ topicMessages: [...out].map(([topic, messages]) => ({ topic, messages })), acks: -1 });
          } catch (err) {
            throw kafkaError(err, `re-sending DLQ records failed after ${tally.replayed - sending} were re-sent`);
          }
        }
        tally.progress();
        return stop;
      });
    } finally {
      await producer?.disconnect();
    }
    tally.progress(true);
    return tally.report();
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Feeds `visit` the DLQ records in fetch batches (per partition, in offset order) until every
   * partition reached its end as of the start or `visit` returns true.
   */
  private async scan(query: DeadLetterQuery, visit: (batch: Array<{ letter: DeadLetter; message: KafkaMessage }>) => Promise<boolean>): Promise<void> {
    const topic = renderName(this.settings.dlqTemplate, query.model);
    const admin = this.kafka.admin();
    await admin.connect().catch((err: unknown) => {
      throw kafkaError(err, `reading the DLQ topic ${topic} failed: no broker answered`);
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

  private async consume(
    topic: string,
    groupId: string,
    ranges: Map<number, { from: number; end: number }>,
    query: DeadLetterQuery,
    visit: (batch: Array<{ letter: DeadLetter; message: KafkaMessage }>) => Promise<boolean>,
  ): Promise<void> {
    const consumer = this.kafka.consumer({ groupId, allowAutoTopicCreation: false, maxWaitTimeInMs: 500 });
    const open = new Set(ranges.keys());
    let lastProgressAt = Date.now();
    let failure: unknown;
    let finish: () => void = () => undefined;
    const finished = new Promise<void>((resolve) => (finish = resolve));
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
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachBatch: async ({ batch }) => {
          const range = ranges.get(batch.partition);
          if (range === undefined || !open.has(batch.partition) || failure !== undefined) return;
          lastProgressAt = Date.now();
          const items: Array<{ letter: DeadLetter; message: KafkaMessage }> = [];
          for (const message of batch.messages) {
            const offset = Number(message.offset);
            if (offset < range.from || offset >= range.end) continue;
            const letter = letterOf(topic, batch.partition, message, (source) => sourcePriority(this.settings.topicTemplate, query.model, source) ?? undefined);
            if (query.sinceAt === undefined || letter.deadAt >= query.sinceAt) items.push({ letter, message });
          }
          let stop = false;
          try {
            stop = await visit(items);
          } catch (err) {
            failure = err;
            stop = true;
          }
          if (stop) {
            open.clear();
            finish();
          }
        },
      });
      for (const [partition, { from }] of ranges) consumer.seek({ topic, partition, offset: String(from) });
      const stalled = setInterval(() => {
        if (Date.now() - lastProgressAt < STALL_MS) return;
        failure ??= new FleetError('TIMEOUT', `reading DLQ topic ${topic} made no progress for ${STALL_MS / 1000} s (${open.size} partition(s) unfinished); is the broker up?`, { retriable: true });
        finish();
      }, 1_000);
      await finished.finally(() => clearInterval(stalled));
    } finally {
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
  return {
    ref: `${topic}/${partition}/${message.offset}`,
    reason: headerText(headers[HEADERS.dlqReason]) ?? '',
    message: headerText(headers[HEADERS.dlqMessage]) ?? '',
    source,
    priority: source === undefined ? undefined : priorityOf(source),
    requestId: headerText(headers[HEADERS.requestId]) ?? requestIdOf(value),
    deadAt: Number(message.timestamp),
    bytes: value.byteLength,
  };
}
