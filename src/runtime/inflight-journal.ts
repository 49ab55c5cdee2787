import { createHash } from 'node:crypto';
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FleetConfig } from '../contracts/fleet-config.ts';

/** A request the previous worker of this device had in flight when it died (InflightJournal.takeCrashHints). */
export interface CrashHint {
  /** Its suspect count when it went to the device. */
  readonly suspectCount: number;
  /**
   * It was in the batch that hung: the broker may hold that hang already (recording it can half
   * succeed, as on Kafka when some of the batch's partitions were revoked), so it is not counted again.
   */
  readonly hung: boolean;
  /** Carried on by a worker that died before it came back: when the first worker found it (epoch ms). */
  readonly foundAt?: number | undefined;
}

/**
 * Why: a request whose execution kills the worker process (a driver segfault or abort; the
 * simulator's crash@value=V) would crash-loop the fleet just like one that hangs the device, but
 * a dead process cannot record anything as it dies. So each worker keeps, in a small local file,
 * the delivery ids of its batches in flight, the one on the device first (rewritten when a batch
 * is dispatched and when one finishes: a few hundred bytes, two positioned writes per batch;
 * emptied on a clean stop and once a hang is being recorded with the broker). The worker started next for the same device reads
 * what a dead predecessor left (takeCrashHints) and counts each of those requests as a suspect
 * when it comes back, as after a hang: it runs alone, with nothing else on the device (so the
 * next crash blames it alone), and at worker.maxHangsPerRequest it is quarantined. Best effort: a
 * journal that cannot be written is reported once and tried again a second later (a disk full for
 * a while must not leave the file as it was then, naming requests long answered instead of the
 * ones on the device, for the rest of the worker's life).
 * JS thread only.
 */
export class InflightJournal {
  private reported = false;
  /** After a failed write: not before this (epoch ms), so a journal that stays unwritable costs nothing. */
  private retryAt = 0;
  private fd: number | undefined;
  /** Bytes the file holds: a shorter record is padded with spaces over the rest (JSON allows them). */
  private length = 0;

  constructor(
    readonly path: string,
    private readonly onError: (err: unknown) => void = () => undefined,
    private readonly retryMs = 1000,
  ) {}

  /**
   * The batches in flight, in dispatch order (the first is on the device), each the JSON of its
   * [delivery id, times it was a suspect before] pairs (a third element 1: the batch hung, see
   * CrashHint.hung): the count travels with the journal too, so
   * a crash loop is cut short even when recording suspects with the broker failed (a commit during
   * a rebalance). One positioned write of the open file: rewriting the file (open, truncate,
   * close) cost ~150 µs a time, a tenth of the Kafka pipeline's throughput at two per batch.
   */
  record(batches: readonly string[]): void {
    if (this.retryAt !== 0 && Date.now() < this.retryAt) return;
    try {
      this.fd ??= openSync(this.path, 'w');
      const text = `[${batches.join(',')}]`;
      const bytes = Buffer.byteLength(text);
      writeSync(this.fd, bytes < this.length ? text + ' '.repeat(this.length - bytes) : text, 0, 'utf8');
      this.length = Math.max(this.length, bytes);
      this.retryAt = 0;
    } catch (err) {
      this.retryAt = Date.now() + this.retryMs;
      if (!this.reported) this.onError(err);
      this.reported = true;
    }
  }

  clear(): void {
    this.record([]);
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  /**
   * The requests of the batches in flight when the previous worker of this device died (none
   * after a clean stop or a recorded hang, but for those of an earlier crash that had not come back
   * yet: CrashSuspects carries them), each with its suspect count then, and empties the
   * journal. All of them: the device may have been executing the second batch while the first
   * was still copying out.
   */
  takeCrashHints(): Map<string, CrashHint> {
    const hints = new Map<string, CrashHint>();
    let text = '';
    try {
      text = readFileSync(this.path, 'utf8');
    } catch {
      return hints; // no predecessor
    }
    this.clear();
    if (text.trim() === '') return hints;
    let batches: unknown;
    try {
      batches = JSON.parse(text);
    } catch {
      return hints; // torn by the crash itself: nothing to go on
    }
    for (const batch of Array.isArray(batches) ? batches : []) {
      for (const entry of Array.isArray(batch) ? batch : []) {
        if (Array.isArray(entry) && typeof entry[0] === 'string' && Number.isSafeInteger(entry[1]) && (entry[1] as number) >= 0) {
          const foundAt = Number.isSafeInteger(entry[3]) ? (entry[3] as number) : undefined;
          hints.set(entry[0], { suspectCount: entry[1] as number, hung: entry[2] === 1, ...(foundAt === undefined ? {} : { foundAt }) });
        }
      }
    }
    return hints;
  }
}

/**
 * Where a device's journal lives: worker.journalDir (default the OS temp dir), one file per
 * fleet (brokers and consumer group, or Redis and prefix), host and device, so two fleets on one
 * host keep apart, and so do the workers of one device number on machines sharing the directory (a
 * network volume): in one file they overwrote each other's batches, and the worker restarted after
 * a crash counted another machine's requests as its suspects instead of its own. The memory broker
 * has none: its work dies with the process.
 */
export function inflightJournalPath(config: FleetConfig, deviceId: number, host = hostname()): string | undefined {
  const t = config.transport;
  if (t.kind === 'memory') return undefined;
  const fleet = t.kind === 'kafka' ? `kafka|${[...t.kafka.brokers].sort().join(',')}|${t.kafka.groupId}` : `bullmq|${t.bullmq.redisUrl}|${t.bullmq.prefix}`;
  const id = createHash('sha256').update(`${fleet}|${host}`).digest('hex').slice(0, 16);
  return join(config.worker.journalDir || tmpdir(), `npu-fleet-${id}-device-${deviceId}.inflight.json`);
}
