import { createHash } from 'node:crypto';
import { closeSync, existsSync, ftruncateSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BullmqSettings, FleetConfig } from '../contracts/fleet-config.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { predecessorNotePath } from './predecessor-note.ts';

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
 * Each record is framed, `npu-fleet-journal/1 <payload bytes, 8 digits> <checksum>\n<payload>`, the
 * payload the JSON of the batches: a record is written in place over the previous one, so a write
 * cut short (a disk filling up, a quota) or torn (a machine crash mid-write) leaves the new
 * record's head over the old one's tail, which may well parse as JSON naming requests of both
 * (blaming some for a crash they were not in, losing a suspect's count). The frame tells such a
 * file from a whole record.
 */
const FRAME = /^npu-fleet-journal\/1 (\d{8}) ([0-9a-f]{16})\n/;

function checksumOf(payload: Buffer): string {
  return createHash('sha256').update(payload).digest('hex').slice(0, 16);
}

function framed(payload: string): Buffer {
  const bytes = Buffer.from(payload, 'utf8');
  return Buffer.concat([Buffer.from(`npu-fleet-journal/1 ${String(bytes.length).padStart(8, '0')} ${checksumOf(bytes)}\n`), bytes]);
}

/**
 * What a journal file holds: the batches of its last whole record (an empty file: none), or why
 * it cannot be used. A missing file is `undefined`: a first start, not a fault.
 */
export function readInflightJournal(path: string): { batches: unknown[] } | { unusable: string } | undefined {
  let file: Buffer;
  try {
    file = readFileSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    return { unusable: `unreadable: ${(err as Error).message}` };
  }
  if (file.toString('latin1').trim() === '') return { batches: [] };
  const head = FRAME.exec(file.subarray(0, 64).toString('latin1'));
  if (head === null) return { unusable: 'no record header (torn, or not written by this version)' };
  const payload = file.subarray(head[0].length, head[0].length + Number(head[1]));
  if (payload.length < Number(head[1])) return { unusable: `torn: ${payload.length} of ${Number(head[1])} bytes of the record` };
  if (checksumOf(payload) !== head[2]) return { unusable: 'torn: the record does not match its checksum' };
  let batches: unknown;
  try {
    batches = JSON.parse(payload.toString('utf8'));
  } catch (err) {
    return { unusable: `not JSON: ${(err as Error).message}` };
  }
  return Array.isArray(batches) ? { batches } : { unusable: 'not a list of batches' };
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
 * ones on the device, for the rest of the worker's life); meanwhile it is emptied, as a stale or
 * half-written record would blame the wrong requests for a crash, while none only costs the count
 * of that one crash.
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
      const record = framed(`[${batches.join(',')}]`);
      const bytes = record.length < this.length ? Buffer.concat([record, Buffer.alloc(this.length - record.length, ' ')]) : record;
      const written = writeSync(this.fd, bytes, 0, bytes.length, 0);
      this.length = Math.max(this.length, written);
      if (written < bytes.length) {
        throw new FleetError('INTERNAL', `short write of the in-flight journal: ${written} of ${bytes.length} bytes (disk full or over quota?)`, { retriable: true, details: { path: this.path } });
      }
      this.retryAt = 0;
    } catch (err) {
      this.retryAt = Date.now() + this.retryMs;
      this.empty();
      if (!this.reported) this.onError(err);
      this.reported = true;
    }
  }

  /** After a failed write: truncating frees blocks, so it works on a full disk too. */
  private empty(): void {
    this.length = 0;
    try {
      if (this.fd !== undefined) ftruncateSync(this.fd, 0);
    } catch {
      // Reopened, which truncates, on the next try.
      this.close();
    }
  }

  clear(): void {
    this.record([]);
  }

  close(): void {
    const fd = this.fd;
    this.fd = undefined;
    try {
      if (fd !== undefined) closeSync(fd);
    } catch {
      // Nothing left to flush: the writes were synchronous.
    }
  }

  /**
   * The requests of the batches in flight when the previous worker of this device died (none
   * after a clean stop or a recorded hang, but for those of an earlier crash that had not come back
   * yet: CrashSuspects carries them), each with its suspect count then, and empties the
   * journal. All of them: the device may have been executing the second batch while the first
   * was still copying out. A journal that cannot be read, or holds no whole record, goes to
   * `onUnusable` with the reason and gives none: that crash goes uncounted, rather than counted
   * against requests that may not have been on the device.
   */
  takeCrashHints(onUnusable: (reason: string) => void = () => undefined): Map<string, CrashHint> {
    const hints = new Map<string, CrashHint>();
    const read = readInflightJournal(this.path);
    if (read === undefined) return hints; // no predecessor
    this.clear();
    // Ignored whole: a torn record cannot say which of its ids were on the device.
    if ('unusable' in read) {
      onUnusable(read.unusable);
      return hints;
    }
    for (const batch of read.batches) {
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
 *
 * On BullMQ a journal found under the name earlier versions gave it (the hash of the whole
 * redisUrl, password included) is moved here, with its owner note, when none is here yet: the
 * upgrade keeps a crashed worker's record.
 */
export function inflightJournalPath(config: FleetConfig, deviceId: number, host = hostname()): string | undefined {
  const t = config.transport;
  if (t.kind === 'memory') return undefined;
  const fleet = t.kind === 'kafka' ? `kafka|${[...t.kafka.brokers].sort().join(',')}|${t.kafka.groupId}` : `bullmq|${redisIdentity(t.bullmq)}|${t.bullmq.prefix}`;
  const dir = config.worker.journalDir || tmpdir();
  const path = join(dir, journalFileName(fleet, host, deviceId));
  if (t.kind !== 'bullmq') return path;
  return adoptLegacyJournal(join(dir, journalFileName(`bullmq|${t.bullmq.redisUrl}|${t.bullmq.prefix}`, host, deviceId)), path);
}

function journalFileName(fleet: string, host: string, deviceId: number): string {
  const id = createHash('sha256').update(`${fleet}|${host}`).digest('hex').slice(0, 16);
  return `npu-fleet-${id}-device-${deviceId}.inflight.json`;
}

/**
 * Which Redis a fleet uses, without its login: host, port and db (or the Sentinel master name and
 * its sentinels, the URL's host then not being dialled). The journal was named by the whole
 * redisUrl, so rotating the Redis password moved it, and the worker started after a crash
 * before the rotation no longer found its crash-suspect record (a poison input crash-looped on).
 */
function redisIdentity(bullmq: Pick<BullmqSettings, 'redisUrl' | 'sentinel'>): string {
  let url: URL;
  try {
    url = new URL(bullmq.redisUrl);
  } catch {
    // ioredis refuses such a URL at start anyway; the name still must not carry a password.
    return bullmq.redisUrl.replace(/\/\/[^@/]*@/, '//');
  }
  // As ioredis reads it: the path's db, else a db= parameter.
  const db = url.pathname.replace(/^\//, '') || url.searchParams.get('db') || '0';
  const s = bullmq.sentinel;
  const where = s === undefined ? `${url.hostname.toLowerCase()}:${url.port || '6379'}` : `sentinel:${s.name}@${[...s.sentinels].map((h) => h.toLowerCase()).sort().join(',')}`;
  return `${where}/${Number.isNaN(Number(db)) ? db : Number(db)}`;
}

/**
 * `path`, after moving the journal and owner note at `legacy` there when `path` holds none (best
 * effort: a move that fails keeps the legacy name, still readable where it is). Once moved,
 * nothing is left at `legacy`, so later starts find only `path`.
 */
function adoptLegacyJournal(legacy: string, path: string): string {
  if (legacy === path || !existsSync(legacy) || existsSync(path)) return path;
  try {
    renameSync(legacy, path);
  } catch {
    return legacy;
  }
  try {
    if (existsSync(predecessorNotePath(legacy)) && !existsSync(predecessorNotePath(path))) renameSync(predecessorNotePath(legacy), predecessorNotePath(path));
  } catch {
    // The note only spares the jobs of a dead predecessor their lock timeout: without it they come back later.
  }
  return path;
}
