import type { Logger } from '../observability/logger.ts';

export interface RepositoryPollOptions<S> {
  /** The model repository, named in the warning about a scan past its time limit. */
  readonly dir: string;
  /** Pause between the end of one poll and the start of the next. */
  readonly intervalMs: number;
  /** A scan still going after this long is warned about and counted (it is left to finish). */
  readonly scanLimitMs: number;
  readonly log: Logger;
  /** Whether to poll at this tick (the worker is running, not draining or hung). */
  readonly active: () => boolean;
  /** Reads the repository; must not block the event loop (scanRepositoryAsync). */
  readonly scan: () => Promise<S>;
  /** Acts on a scan (loads and unloads versions): not under the time limit, loads take long on an NPU. */
  readonly apply: (snapshot: S) => Promise<void>;
  /** A scan went past scanLimitMs (npu_fleet_model_repository_slow_scans_total). */
  readonly onSlowScan: () => void;
}

export interface RepositoryPoll {
  /** No poll starts after this; one under way is not waited for (a hung mount would hold a stop forever). */
  stop(): void;
}

/**
 * The worker's hot-reload poll (polling: fs.watch misses events on some filesystems and reports
 * half-written files). One poll at a time, the next one intervalMs after the previous settles: a
 * scan stuck on a hung NFS mount occupies one libuv thread until the mount answers, and polls
 * started on a timer behind it would take the rest of the pool (4 threads), and with it every
 * fs call and DNS lookup of the process (broker reconnects). Serving goes on with what is loaded.
 */
export function startRepositoryPoll<S>(o: RepositoryPollOptions<S>): RepositoryPoll {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  // A failure that lasts (a volume unmounted for hours) fails every poll the same way: logged
  // each second it would bury the worker's log; logged when it starts or changes, and when it ends.
  let failing: { message: string; polls: number; sinceMs: number } | undefined;
  const failed = (err: unknown): void => {
    const message = err instanceof Error ? err.message : String(err);
    if (failing?.message !== message) {
      o.log.error({ err }, 'model repository reload failed; keeping the current versions');
      failing = { message, polls: failing?.polls ?? 0, sinceMs: failing?.sinceMs ?? Date.now() };
    }
    failing.polls++;
  };
  const succeeded = (): void => {
    if (failing === undefined) return;
    o.log.info({ dir: o.dir, failedPolls: failing.polls, failingMs: Date.now() - failing.sinceMs }, `model repository ${o.dir}: reloads work again`);
    failing = undefined;
  };

  const pollOnce = async (): Promise<void> => {
    const startedAt = Date.now();
    let slow = false;
    const limit = setTimeout(() => {
      slow = true;
      o.onSlowScan();
      o.log.warn({ dir: o.dir, scanLimitMs: o.scanLimitMs }, `model repository ${o.dir}: a scan has not finished after ${o.scanLimitMs} ms (a hung or slow mount?); serving on with the loaded versions, the next scan starts once this one returns`);
    }, o.scanLimitMs);
    limit.unref();
    let snapshot: S;
    try {
      snapshot = await o.scan();
    } finally {
      clearTimeout(limit);
      if (slow) o.log.warn({ dir: o.dir, scanMs: Date.now() - startedAt }, `model repository ${o.dir}: the slow scan returned`);
    }
    // What a late scan found is as current as any: applied, or a mount always slower than the limit would never reload.
    if (!stopped) await o.apply(snapshot);
  };

  const schedule = (): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      timer = undefined;
      if (stopped) return;
      if (!o.active()) {
        schedule();
        return;
      }
      void pollOnce()
        .then(succeeded, failed)
        .finally(schedule);
    }, o.intervalMs);
    timer.unref();
  };
  schedule();

  return {
    stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
    },
  };
}
