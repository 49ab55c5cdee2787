import { randomUUID } from 'node:crypto';
import type { IHeaders, Kafka, KafkaMessage, Message } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { decodeRequest, encodeRequest, isFrame } from '../../codec/index.ts';
import { FleetError } from '../../errors/fleet-error.ts';
import { checkQuery, expiredWhy, inWindow, ListingBuilder, matchesReason, refreshedWhy, replayHeaders, replayTarget, ReplayTally, requestFacts, sourcePriority, type DeadLetter, type DeadLetterListing, type DeadLetterQuery, type DeadLetters, type PurgeOptions, type PurgeReport, type ReplayOptions, type ReplayReport } from '../dead-letters.ts';
import { HEADERS, renderName } from '../names.ts';
import { createKafka, kafkaError, startFailure, type TransportLogger } from './kafka-client.ts';
import { topicMaxMessageBytes } from './fetch-size.ts';
import { chunkByBytes, type OutgoingMessage } from './kafka-outcomes.ts';
import { readRanges, topicRanges } from './read-ranges.ts';
import { markerTopicOf, originalKey, ReplayLedger, type Original } from './replay-ledger.ts';
import { ReplayProducer, replayTakenOver } from './replay-producer.ts';

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

/** What ReplayLedger.load creates the markers with: false for a run that writes none. */
type ScanMarkers = Parameters<typeof ReplayLedger.load>[0]['create'];

type Visit = (batch: Array<{ letter: DeadLetter; message: KafkaMessage }>, ledger: ReplayLedger) => Promise<boolean>;

/**
 * A model's Kafka DLQ topic (see DeadLetters). Each list/replay reads the partitions from the
 * first record at or after `sinceAt` (else the oldest retained) up to their end as of the start,
 * with a consumer group of its own (`npu-fleet-dlq-<uuid>`: the principal needs Read and Delete
 * on such groups) that commits nothing and is deleted afterwards, so it never moves anyone's
 * offsets. Replay re-sends the original key, value and headers (minus the DLQ's) to the topic in
 * the record's `npu-fleet-dlq-source`, with `npu-fleet-replay-of` added. The DLQ record stays (a
 * log is not edited), so each re-send goes out in one transaction with a marker saying so
 * (ReplayLedger), and replays pass over records with a marker: a record is re-sent once, by one
 * replay, also when replays run at the same time (ReplayProducer fences the earlier one). Sends fit
 * each request topic's max.message.bytes (read with DescribeConfigs; the broker default where that
 * is refused), and a record over it is skipped. JS thread only.
 */
export class KafkaDeadLetters implements DeadLetters {
  private readonly kafka: Kafka;
  /** The replay producer's: more retries, since taking over from a replay waits until the broker aborted its transaction. */
  private readonly replayKafka: Kafka;

  constructor(
    private readonly settings: KafkaSettings,
    private readonly logger?: TransportLogger,
    /** A read that makes no progress for this long (time spent re-sending not counted) has stalled. */
    private readonly stallMs = STALL_MS,
  ) {
    this.kafka = createKafka({ ...settings, clientId: `${settings.clientId}-dlq` }, logger, 3);
    this.replayKafka = createKafka({ ...settings, clientId: `${settings.clientId}-dlq` }, logger, 8);
  }

  async list(query: DeadLetterQuery): Promise<DeadLetterListing> {
    checkQuery(query);
    const listing = new ListingBuilder(query);
    let alreadyReplayed = 0;
    await this.scan(query, false, (batch) => {
      for (const { letter } of batch) {
        listing.add(letter);
        if (letter.replayedAt !== undefined && matchesReason(letter, query)) alreadyReplayed++;
      }
      return Promise.resolve(false);
    });
    return { ...listing.build(), alreadyReplayed };
  }

  async replay(options: ReplayOptions): Promise<ReplayReport> {
    checkQuery(options);
    const tally = new ReplayTally(options);
    // Originals (originalKey) re-sent by this replay or found marked. Without exactlyOnce a worker
    // that dies between writing a DLQ record and committing its offset answers the message again
    // after the restart: a second record of it, which must not send it twice. Those an earlier
    // replay re-sent through a record this one does not read come from the ledger.
    const resentOriginals = new Set<string>();
    const dlqTopic = renderName(this.settings.dlqTemplate, options.model);
    const takenOver = {
      what: `replaying the DLQ of ${options.model}`,
      why: (by: string) =>
        `another replay of it started and took over (${by}); this one re-sent ${tally.replayed} record(s) before that, each with its marker, so no replay re-sends them. The other one passes over them; if its --reason/--since/--limit do not cover the rest of this one's, run this replay again once it has finished`,
      details: () => ({ replayed: tally.replayed }),
    };
    await this.fenced(options, tally, takenOver, async (producer, markers) => {
      // A send to a topic that does not exist, or over what it takes, fails the whole batch, and
      // with it the replay: such records (a priority the model no longer has, a deleted topic, a
      // limit lowered since) are skipped instead.
      const topics = await this.requestTopics(options.model);
      await this.scan(options, markers, async (batch, ledger) => {
        // Between transactions: every one before was committed in full and counted.
        if (tally.stopping()) return true;
        const out: Array<OutgoingMessage & { ref: string; deadAt: number; original: Original | undefined; refreshed: string | undefined }> = [];
        /**
         * Second records of originals re-sent: marked, so later replays pass over them also once the
         * first's marker is gone (it is deleted with the first record, which may be much older).
         */
        const seconds: Array<{ ref: string; source: string; deadAt: number; original: Original }> = [];
        let stop = false;
        const nowMs = Date.now();
        for (const { letter, message } of batch) {
          if (!tally.read(letter)) continue;
          // Counts this batch's records too: tally.replayed grows only once the batch is sent.
          if (tally.stopsAtLimit(out.length)) {
            stop = true;
            break;
          }
          tally.matched++;
          const sourceRef = headerText(message.headers?.[HEADERS.dlqSource]);
          const original = sourceRef === undefined ? undefined : { ref: sourceRef, requestId: letter.requestId };
          const key = original === undefined ? undefined : originalKey(original);
          const markedAt = ledger.replayedAt(letter.ref);
          const purgedAt = ledger.purgedAt(letter.ref);
          if (purgedAt !== undefined) {
            tally.passedOver.push({ ref: letter.ref, why: `discarded by dlq purge at ${new Date(purgedAt).toISOString()} (its marker is in ${markerTopicOf(dlqTopic)})` });
            continue;
          }
          if (markedAt !== undefined) {
            if (key !== undefined) resentOriginals.add(key);
            tally.passedOver.push({ ref: letter.ref, why: `an earlier replay re-sent it at ${new Date(markedAt).toISOString()} (its marker is in ${markerTopicOf(dlqTopic)})` });
            continue;
          }
          if (original !== undefined && key !== undefined && (resentOriginals.has(key) || ledger.originalReplayedAt(key) !== undefined)) {
            const at = ledger.originalReplayedAt(key);
            const by = at === undefined ? 'this replay' : `a replay at ${new Date(at).toISOString()}`;
            tally.passedOver.push({ ref: letter.ref, why: `another DLQ record of the same request (${original.ref}${letter.requestId === undefined ? '' : `, id ${letter.requestId}`}) was re-sent by ${by}` });
            if (letter.source !== undefined) seconds.push({ ref: letter.ref, source: letter.source, deadAt: letter.deadAt, original });
            continue;
          }
          // A request too big for the DLQ topic was dead-lettered without its bytes (kafka-outcomes.ts):
          // its empty value re-sent would be answered `invalid` and marked replayed, the original never re-driven.
          const dropped = headerText(message.headers?.[HEADERS.dlqValueDropped]);
          if (dropped !== undefined) {
            tally.skip(letter.ref, { why: `the record holds no request to re-send (${dropped}); publish the original again from there` });
            continue;
          }
          // The topic is the priority on Kafka.
          const target = replayTarget(letter, { template: this.settings.topicTemplate, model: options.model, nowMs, priorityRequired: false, refreshDeadlineMs: options.refreshDeadlineMs });
          if ('why' in target) {
            tally.skip(letter.ref, target);
            continue;
          }
          if (!topics.has(target.source)) {
            tally.skip(letter.ref, { why: `its source topic ${target.source} does not exist; create it (start a worker of ${options.model} serving that priority) and replay again` });
            continue;
          }
          // A later deadline is set in the request itself, in the encoding it came in; the rest is unchanged.
          const value = target.deadlineAt === undefined || message.value === null ? message.value : withDeadline(message.value, target.deadlineAt);
          const resend = { key: message.key, value, headers: replayHeaders(message.headers ?? {}, letter.ref) };
          const maxBytes = topics.get(target.source) ?? DEFAULT_MAX_MESSAGE_BYTES;
          const bytes = leastBatchBytes(resend);
          if (bytes > maxBytes) {
            tally.skip(letter.ref, { why: `it is ${bytes} bytes or more re-sent, over max.message.bytes (${maxBytes}) of ${target.source}; raise that topic's max.message.bytes and replay again` });
            continue;
          }
          out.push({ topic: target.source, message: resend, ref: letter.ref, deadAt: letter.deadAt, original, refreshed: target.deadlineAt === undefined ? undefined : refreshedWhy(letter, target.deadlineAt, nowMs) });
          if (key !== undefined) resentOriginals.add(key);
        }
        const sent = (chunk: typeof out): void => {
          tally.replayed += chunk.length;
          for (const m of chunk) if (m.refreshed !== undefined) tally.refreshed.push({ ref: m.ref, why: m.refreshed });
        };
        if (producer === undefined) sent(out);
        else {
          // One chunk after another (in DLQ order), each in a transaction with its markers, counted
          // as each commits: a failure part way reports what went out before it. Chunks fit the
          // smallest limit of the batch's topics (mostly all the broker default) with the margin
          // chunkByBytes keeps below 1 MiB; the markers (~100 bytes each) go to another topic.
          const maxBytes = out.reduce((n, m) => Math.min(n, Math.floor((topics.get(m.topic) ?? DEFAULT_MAX_MESSAGE_BYTES) * 0.875)), SEND_BYTES);
          const chunks = chunkByBytes(out, maxBytes).flatMap((bytesChunk) => {
            const split: Array<typeof out> = [];
            for (let i = 0; i < bytesChunk.length; i += SEND_RECORDS) split.push(bytesChunk.slice(i, i + SEND_RECORDS));
            return split;
          });
          /** Taken but not sent: the replay was stopped (options.signal) before their transaction. */
          let unsent: typeof out = [];
          for (const [c, chunk] of chunks.entries()) {
            if (tally.stopping()) {
              unsent = chunks.slice(c).flat();
              break;
            }
            const replayedAt = Date.now();
            await producer.send([...chunk.map(({ topic, message }) => ({ topic, message })), ...chunk.map((m) => ledger.marker(m.ref, m.topic, replayedAt, m.deadAt, m.original))]);
            sent(chunk);
            tally.progress();
          }
          // A second record whose original was among those left unsent is not passed over after
          // all (nor marked): the next replay re-sends the original through one of the two.
          const unsentOriginals = new Set(unsent.flatMap((m) => (m.original === undefined ? [] : [originalKey(m.original)])));
          const marked = seconds.filter((m) => !unsentOriginals.has(originalKey(m.original)));
          if (marked.length < seconds.length) {
            const left = new Set(seconds.filter((m) => unsentOriginals.has(originalKey(m.original))).map((m) => m.ref));
            for (let i = tally.passedOver.length - 1; i >= 0; i--) if (left.has(tally.passedOver[i]?.ref ?? '')) tally.passedOver.splice(i, 1);
          }
          // After the re-sends they stand for: a replay that dies before leaves them unmarked, and
          // the next one passes over them once it has read the first's marker.
          if (marked.length > 0) {
            const replayedAt = Date.now();
            await producer.send(marked.map((m) => ledger.marker(m.ref, m.source, replayedAt, m.deadAt, m.original)));
          }
        }
        tally.progress();
        return stop || tally.stopped;
      });
    });
    return tally.report();
  }

  /**
   * Discards matching records whose deadline has passed. The log is not edited: each gets a purge
   * marker (ReplayLedger.marker 'purged') that replays and later purges pass over. Markers go out
   * with the replays' transactional id, opened before the markers are read, so a purge and a
   * replay of the same DLQ never both act on a record: the later one fences the earlier.
   */
  async purge(options: PurgeOptions): Promise<PurgeReport> {
    checkQuery(options);
    const tally = new ReplayTally(options);
    const purged: Array<{ ref: string; why: string }> = [];
    let kept = 0;
    let alreadyDone = 0;
    const takenOver = {
      what: `purging the DLQ of ${options.model}`,
      why: (by: string) => `a replay or purge of it started and took over (${by}); this one discarded ${tally.replayed} record(s) before that. Run it again once the other has finished`,
      details: () => ({ purged: tally.replayed }),
      done: 'discarded',
    };
    await this.fenced(options, tally, takenOver, async (producer, markers) => {
      await this.scan(options, markers, async (batch, ledger) => {
        const out: DeadLetter[] = [];
        let stop = false;
        const nowMs = Date.now();
        for (const { letter } of batch) {
          if (!tally.read(letter)) continue;
          if (options.limit !== undefined && tally.replayed + out.length >= options.limit) {
            stop = true;
            break;
          }
          tally.matched++;
          if (ledger.replayedAt(letter.ref) !== undefined) alreadyDone++;
          else if (letter.deadlineAt === undefined || letter.deadlineAt > nowMs) kept++;
          else out.push(letter);
        }
        for (let i = 0; i < out.length; i += SEND_RECORDS) {
          const chunk = out.slice(i, i + SEND_RECORDS);
          const purgedAt = Date.now();
          await producer?.send(chunk.map((l) => ledger.marker(l.ref, l.source ?? '', purgedAt, l.deadAt, 'purged')));
          tally.replayed += chunk.length;
          for (const l of chunk) purged.push({ ref: l.ref, why: expiredWhy(l.deadlineAt ?? nowMs) });
          tally.progress();
        }
        tally.progress();
        return stop;
      });
    });
    return { scanned: tally.scanned, matched: tally.matched, purged, kept, skipped: [], alreadyDone };
  }

  async close(): Promise<void> {}

  /**
   * The frame of a replay or purge: the DLQ's ReplayProducer is opened, fencing any replay or purge
   * of it still running, before `run` reads the markers (scan), and closed after; a dry run fences
   * nothing and writes nothing (no producer, no markers). A run fenced by a later one fails saying
   * so and what it did before (`takenOver`), any other failure as tally.failed puts it.
   */
  private async fenced(
    options: ReplayOptions | PurgeOptions,
    tally: ReplayTally,
    takenOver: { what: string; why: (by: string) => string; details: () => Record<string, unknown>; done?: string },
    run: (producer: ReplayProducer | undefined, markers: ScanMarkers) => Promise<void>,
  ): Promise<void> {
    const dlqTopic = renderName(this.settings.dlqTemplate, options.model);
    const producer = options.dryRun === true ? undefined : new ReplayProducer(this.replayKafka, dlqTopic, this.settings);
    const warn = options.onWarning ?? ((message: string) => this.logger?.warn({ dlqTopic }, message));
    try {
      await producer?.open();
      await run(producer, producer === undefined ? false : { bootstrap: this.settings.brokers[0] ?? 'BROKER', warn });
    } catch (err) {
      if (replayTakenOver(err)) {
        throw new FleetError('TRANSPORT_ERROR', `${takenOver.what} stopped: ${takenOver.why((err as FleetError).message)}`, {
          cause: err,
          retriable: false,
          details: { replayTakenOver: true, ...takenOver.details() },
        });
      }
      throw tally.failed(err, `${takenOver.what} failed`, takenOver.done);
    } finally {
      await producer?.close();
    }
    tally.progress(true);
  }

  /** The model's request topics that exist, each with the largest record batch it takes (max.message.bytes). */
  private async requestTopics(model: string): Promise<Map<string, number>> {
    const admin = this.kafka.admin();
    await admin.connect().catch((err: unknown) => {
      throw kafkaError(err, startFailure('listing topics failed', err, this.settings));
    });
    try {
      const names = (await admin.listTopics()).filter((t) => sourcePriority(this.settings.topicTemplate, model, t) !== null);
      const topics = new Map(names.map((t) => [t, DEFAULT_MAX_MESSAGE_BYTES]));
      if (names.length === 0) return topics;
      try {
        for (const [name, maxBytes] of await topicMaxMessageBytes(admin, names)) topics.set(name, maxBytes);
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
   * Feeds `visit` the DLQ records in fetch batches (per partition, in offset order), each with when
   * it was replayed (from the ledger, read first), until every partition reached its end as of the
   * start or `visit` returns true. `markers`: the ledger is for a replay that writes markers (its
   * topic is created if missing, its retention brought in line; see ReplayLedger.load).
   */
  private async scan(query: DeadLetterQuery, markers: ScanMarkers, visit: Visit): Promise<void> {
    const topic = renderName(this.settings.dlqTemplate, query.model);
    const admin = this.kafka.admin();
    await admin.connect().catch((err: unknown) => {
      // What failed (a SASL login, TLS, no broker at all), not always the broker list.
      throw kafkaError(err, startFailure(`reading the DLQ topic ${topic} failed`, err, this.settings));
    });
    const groupId = `npu-fleet-dlq-${randomUUID()}`;
    try {
      const { partitions, ranges } = await topicRanges(admin, topic, query.sinceAt);
      if (ranges.size === 0) return;
      const ledger = await ReplayLedger.load({ kafka: this.kafka, admin, dlqTopic: topic, dlqPartitions: partitions, dlqRanges: ranges, create: markers, stallMs: this.stallMs });
      await readRanges({
        kafka: this.kafka,
        topic,
        what: `DLQ topic ${topic}`,
        groupId,
        ranges,
        stallMs: this.stallMs,
        visit: (partition, messages) => {
          const items: Array<{ letter: DeadLetter; message: KafkaMessage }> = [];
          for (const message of messages) {
            const letter = letterOf(topic, partition, message, (source) => sourcePriority(this.settings.topicTemplate, query.model, source) ?? undefined, ledger);
            if (inWindow(letter, query)) items.push({ letter, message });
          }
          return visit(items, ledger);
        },
      });
    } finally {
      await admin.deleteGroups([groupId]).catch(() => undefined);
      await admin.disconnect();
    }
  }
}

/** `value` (a request the DLQ record holds) with `deadlineAt`, in its own wire encoding. */
function withDeadline(value: Buffer, deadlineAt: number): Buffer {
  return encodeRequest({ ...decodeRequest(value), deadlineAt }, isFrame(value) ? 'binary' : 'json');
}

function letterOf(topic: string, partition: number, message: KafkaMessage, priorityOf: (source: string) => number | undefined, ledger: ReplayLedger): DeadLetter {
  const headers = message.headers ?? {};
  // "topic/partition/offset"; Kafka topic names have no '/'.
  const source = headerText(headers[HEADERS.dlqSource])?.split('/')[0] || undefined;
  const value = message.value ?? Buffer.alloc(0);
  const facts = requestFacts(value);
  const ref = `${topic}/${partition}/${message.offset}`;
  const requestId = facts.requestId ?? headerText(headers[HEADERS.requestId]);
  const sourceRef = headerText(headers[HEADERS.dlqSource]);
  return {
    ref,
    reason: headerText(headers[HEADERS.dlqReason]) ?? '',
    message: headerText(headers[HEADERS.dlqMessage]) ?? '',
    source,
    priority: source === undefined ? undefined : priorityOf(source),
    requestId,
    deadlineAt: facts.deadlineAt,
    deadAt: Number(message.timestamp),
    bytes: value.byteLength,
    // Its own marker, else one of another record of its original (which replay passes it over for).
    purgedAt: ledger.purgedAt(ref),
    replayedAt: ledger.replayedAt(ref) ?? (sourceRef === undefined ? undefined : ledger.originalReplayedAt(originalKey({ ref: sourceRef, requestId }))),
  };
}
