import { readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { Logger } from '../observability/logger.ts';
import type { PredecessorNote } from '../transport/transport.ts';

/** Where a device's worker leaves its note: beside its in-flight journal. */
export function predecessorNotePath(journalPath: string): string {
  return journalPath.replace(/\.inflight\.json$/, '') + '.owner.json';
}

/** Whether a process of this pid runs here (EPERM: it does, as another user). */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The note the previous worker process of this device left for the transport (its BullMQ worker
 * ids or Kafka group member: see TransportStartOptions.predecessor), handed over only when that
 * process is dead: a worker still running (two started for one device by mistake, or a pid reused
 * since) keeps what it holds. A note from another host (a journal directory on a shared volume) is
 * not ours to act on either. Read once at start; the new note replaces it. `ownerRunning`: the
 * note's writer runs here still, so the in-flight journal beside it is that live worker's, not a
 * dead one's (see worker-process.ts). JS thread only; best effort.
 */
export function openPredecessorNote(path: string, log: Logger): PredecessorNote & { readonly ownerRunning: boolean } {
  let previous: string | undefined;
  let ownerRunning = false;
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as { pid?: unknown; host?: unknown; note?: unknown };
    const { pid, host, note } = parsed;
    if (typeof pid === 'number' && typeof note === 'string' && host === hostname()) {
      // Our own pid: a new process in a fresh pid namespace (a restarted container) reuses it.
      if (pid === process.pid || !processAlive(pid)) previous = note;
      else {
        ownerRunning = true;
        log.warn({ pid, path }, 'the previous worker of this device is still running: what it holds is left to it');
      }
    }
  } catch {
    // No note (first start here) or a torn one: nothing to hand over.
  }
  return {
    previous,
    ownerRunning,
    save(note: string): void {
      try {
        writeFileSync(path, JSON.stringify({ pid: process.pid, host: hostname(), note }));
      } catch (err) {
        log.warn({ err, path }, "cannot leave this worker's note for the next worker of the device (worker.journalDir); after a crash, its jobs come back only when their locks lapse");
      }
    },
  };
}
