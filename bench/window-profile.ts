/**
 * A profile of one bench's timed window, by node:inspector in this process (BENCH_PROFILE=cpu: a
 * .cpuprofile for Chrome DevTools / speedscope; BENCH_PROFILE=heap: a sampling .heapprofile of
 * every allocation made in the window, those the young-generation and full collections freed
 * included, i.e. where the allocation rate comes from; BENCH_PROFILE=live: a sampling
 * .heapprofile of what the window allocated and still holds $BENCH_PROFILE_LIVE_MS (default 500)
 * into it, after a full collection: what is alive mid-window; 0: at the window's end, i.e. what
 * the window left behind). Written to $BENCH_PROFILE_DIR (default
 * the OS temp dir); the path is printed. Unset: no profile and no cost.
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface WindowProfile {
  stop(): Promise<string>;
}

let count = 0;

export async function startProfile(name: string): Promise<WindowProfile | undefined> {
  const kind = process.env['BENCH_PROFILE'];
  if (kind !== 'cpu' && kind !== 'heap' && kind !== 'live') return undefined;
  const session = new Session();
  session.connect();
  if (kind === 'cpu') {
    await session.post('Profiler.enable');
    await session.post('Profiler.start');
  } else {
    const all = kind === 'heap';
    await session.post('HeapProfiler.enable');
    await session.post('HeapProfiler.startSampling', {
      samplingInterval: all ? 16_384 : 4_096,
      includeObjectsCollectedByMajorGC: all,
      includeObjectsCollectedByMinorGC: all,
    });
  }
  const finish = async (): Promise<string> => {
    // Live: only what is really held (dead objects stay in the sample until collected).
    if (kind === 'live') await session.post('HeapProfiler.collectGarbage');
    const profile = kind === 'cpu' ? (await session.post('Profiler.stop')).profile : (await session.post('HeapProfiler.stopSampling')).profile;
    session.disconnect();
    const path = join(process.env['BENCH_PROFILE_DIR'] ?? tmpdir(), `${name}-${process.pid}-${++count}.${kind === 'cpu' ? 'cpuprofile' : 'heapprofile'}`);
    writeFileSync(path, JSON.stringify(profile));
    process.stderr.write(`    ${kind} profile of the timed window: ${path}\n`);
    return path;
  };
  if (kind === 'live' && process.env['BENCH_PROFILE_LIVE_MS'] !== '0') {
    const done = new Promise<string>((resolve, reject) => setTimeout(() => finish().then(resolve, reject), Number(process.env['BENCH_PROFILE_LIVE_MS'] ?? 500)));
    return { stop: () => done };
  }
  return { stop: finish };
}
