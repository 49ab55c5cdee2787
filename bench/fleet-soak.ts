/**
 * Fleet soak: does a fleet that runs for hours hold its memory? `npu-fleet start` (supervisor and
 * one worker process per simulated device) serves a steady open-loop `npu-fleet load` for
 * --minutes on Kafka and on BullMQ, as production would run them. Every --sample-s it reads each
 * worker's /metrics (RSS, V8 heap used, external memory, open fds, active handles, event-loop lag
 * p99, device memory, local queue depth; a line every --print-s) and the RSS of the supervisor and of the load generator
 * (the Producer API a service embeds) from /proc. Beside it `npu-fleet frames` sends --streams
 * cameras at 5 fps to a copy of the model with `streams: { superseded: drop }`, so the per-camera
 * memories (served frames, BullMQ frame marks and leases) churn too. On BullMQ, Redis's key count
 * and used memory are followed as well: job retention and the frame marks must keep them flat.
 *
 * Growth is judged after a warm-up: the first fifth of the run (code compiled, pools and the
 * served-frame memory filled), or longer, until each worker has answered SEEN_IDS_MAX requests,
 * whose ids it keeps to count duplicates (~10 MiB of heap once full: a heap snapshot diff of a
 * worker over 6 minutes at 330 req/s showed that map's table as nearly all of the growth): the last third of the remaining samples against the first third,
 * as ratios measured in this one run. RSS by medians, the V8 heap by its floors (the minimum of
 * each window, close to what a collection leaves), open fds and handles by their maxima. Target:
 * every ratio ≤ 1.10, every request answered, no worker restarted, and the fleet drains on
 * SIGTERM with exit 0. A leak of 1 KB per request at 800 req/s would be ≈ 47 MiB a minute.
 *
 * Run: npx tsx bench/fleet-soak.ts [--minutes 10] [--rate 800] [--streams 64] [--sample-s 2] [--print-s 10]
 *      (BENCH_ONLY=kafka|bullmq runs one transport; KAFKA_BROKERS / REDIS_URL use running servers)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { appendFileSync, cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { stringify } from 'yaml';
import { SEEN_IDS_MAX } from '../src/runtime/request-intake.ts';
import { withBenchServices, type BenchServices } from './transport-echo.ts';

type Kind = 'kafka' | 'bullmq';

function numberArg(name: string, fallback: number): number {
  const at = process.argv.indexOf(name);
  if (at < 0) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isFinite(value) || value <= 0) {
    console.error(`fleet-soak: ${name} needs a positive number, got "${process.argv[at + 1] ?? ''}"`);
    process.exit(2);
  }
  return value;
}

const MINUTES = numberArg('--minutes', 10);
const RATE = numberArg('--rate', 800);
const PRINT_MS = numberArg('--print-s', 10) * 1000;
/**
 * Scrapes this often: a heap floor needs samples soon after collections, and the minimum of ~100
 * samples per window finds them where that of a dozen does not.
 */
const SAMPLE_MS = numberArg('--sample-s', 2) * 1000;
const STREAMS = numberArg('--streams', 64);
const DEVICES = 2;
const MODEL = 'mlp-classifier';
/** A copy of MODEL whose cameras' frames supersede each other (written into the run's repository). */
const FRAMES_MODEL = 'mlp-frames';
const GROWTH_TARGET = 1.1;
/** Each worker answers about half of the load and frames: SEEN_IDS_MAX of them fill its id memory. */
const WARM_UP_MS = Math.max(MINUTES * 60_000 * 0.2, (SEEN_IDS_MAX / ((RATE + STREAMS * 5) / DEVICES)) * 1000 * 1.1);
const MIB = 1024 * 1024;

/** What one scrape of a worker gives; sums over label sets (device memory, queue depth per priority). */
const WORKER_SERIES = {
  rssBytes: 'npu_fleet_process_resident_memory_bytes',
  heapUsedBytes: 'npu_fleet_nodejs_heap_size_used_bytes',
  externalBytes: 'npu_fleet_nodejs_external_memory_bytes',
  openFds: 'npu_fleet_process_open_fds',
  activeHandles: 'npu_fleet_nodejs_active_handles_total',
  lagP99Seconds: 'npu_fleet_nodejs_eventloop_lag_p99_seconds',
  deviceMemoryBytes: 'npu_fleet_device_memory_used_bytes',
  queueDepth: 'npu_fleet_local_queue_depth',
} as const;
type WorkerSample = { atMs: number } & Record<keyof typeof WORKER_SERIES, number>;

interface ProcessSample {
  readonly atMs: number;
  readonly rssBytes: number;
}

function parseMetrics(text: string): WorkerSample {
  const sums = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line === '') continue;
    const name = line.slice(0, line.search(/[{ ]/));
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) sums.set(name, (sums.get(name) ?? 0) + value);
  }
  const sample = { atMs: Date.now() } as WorkerSample;
  for (const [key, name] of Object.entries(WORKER_SERIES) as Array<[keyof typeof WORKER_SERIES, string]>) {
    const value = sums.get(name);
    if (value === undefined) throw new Error(`worker /metrics has no ${name}`);
    sample[key] = value;
  }
  return sample;
}

/** VmRSS of a live process, from /proc (the supervisor and the load generator serve no /metrics). */
function procRssBytes(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? undefined : Number(kb) * 1024;
  } catch {
    return undefined;
  }
}

function transportConfig(kind: Kind, services: BenchServices, prefix: string): Record<string, unknown> {
  if (kind === 'bullmq') return { kind, bullmq: { redisUrl: services.redisUrl, prefix } };
  return {
    kind,
    kafka: {
      brokers: services.kafkaBrokers,
      groupId: `${prefix}-workers`,
      clientId: prefix,
      topicTemplate: `${prefix}.{model}.requests.p{priority}`,
      repliesTemplate: `${prefix}.{model}.replies`,
      dlqTemplate: `${prefix}.{model}.dlq`,
    },
  };
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 === 1 ? (s[(s.length - 1) / 2] as number) : ((s[s.length / 2 - 1] as number) + (s[s.length / 2] as number)) / 2;
};
const min = (xs: readonly number[]): number => Math.min(...xs);
const max = (xs: readonly number[]): number => Math.max(...xs);

/** Least-squares slope of value over time, in value units per minute. */
function slopePerMinute(points: ReadonlyArray<{ atMs: number; value: number }>): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((s, p) => s + p.atMs, 0) / n;
  const my = points.reduce((s, p) => s + p.value, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.atMs - mx) * (p.value - my);
    den += (p.atMs - mx) ** 2;
  }
  return den === 0 ? 0 : (num / den) * 60_000;
}

interface Growth {
  readonly what: string;
  readonly early: number;
  readonly late: number;
  readonly ratio: number;
  readonly note: string;
}

/**
 * Early and late windows of the samples after the warm-up: the first and last thirds of them.
 * A small absolute floor keeps a count that goes 3 → 4 (fds of a reconnect) from reading as +33 %.
 */
function growth(what: string, points: ReadonlyArray<{ atMs: number; value: number }>, startedAtMs: number, pick: (xs: readonly number[]) => number, floor: number, unit: (v: number) => string): Growth | undefined {
  const warmUpEndsAt = startedAtMs + WARM_UP_MS;
  const kept = points.filter((p) => p.atMs >= warmUpEndsAt);
  if (kept.length < 3) return undefined;
  const third = Math.max(1, Math.floor(kept.length / 3));
  const early = pick(kept.slice(0, third).map((p) => p.value));
  const late = pick(kept.slice(-third).map((p) => p.value));
  const ratio = Math.max(late, floor) / Math.max(early, floor);
  const slope = slopePerMinute(kept);
  return { what, early, late, ratio, note: `${unit(early)} → ${unit(late)}, slope ${unit(slope)}/min` };
}

const mib = (v: number): string => `${(v / MIB).toFixed(1)} MiB`;
const count = (v: number): string => v.toFixed(v % 1 === 0 ? 0 : 1);

/** An `npu-fleet` command run beside the fleet: its output kept in `logFile`, its last lines at hand. */
function drive(args: readonly string[], logFile: string): { child: ChildProcess; exited: Promise<number | null>; tail: string[] } {
  const child = spawn(process.execPath, ['bin/npu-fleet.js', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const tail: string[] = [];
  const onOutput = (b: Buffer): void => {
    appendFileSync(logFile, b);
    tail.push(...b.toString().split('\n').filter((l) => l !== ''));
    tail.splice(0, Math.max(0, tail.length - 8));
  };
  child.stdout?.on('data', onOutput);
  child.stderr?.on('data', onOutput);
  return { child, exited: new Promise((resolve) => child.once('exit', (code) => resolve(code))), tail };
}

async function soak(kind: Kind, services: BenchServices): Promise<boolean> {
  const dir = mkdtempSync(join(tmpdir(), `npu-fleet-soak-${kind}-`));
  const prefix = `soak-${kind}-${randomUUID().slice(0, 8)}`;
  const configFile = join(dir, 'fleet.yaml');
  const repoDir = join(dir, 'models');
  cpSync(join(process.cwd(), 'examples/models', MODEL), join(repoDir, MODEL), { recursive: true });
  cpSync(join(process.cwd(), 'examples/models', MODEL), join(repoDir, FRAMES_MODEL), { recursive: true });
  const framesConfig = join(repoDir, FRAMES_MODEL, 'config.yaml');
  writeFileSync(framesConfig, readFileSync(framesConfig, 'utf8').replace(`name: ${MODEL}`, `name: ${FRAMES_MODEL}`) + 'streams: { superseded: drop }\n');
  writeFileSync(
    configFile,
    stringify({
      transport: transportConfig(kind, services, prefix),
      modelRepository: repoDir,
      models: [MODEL, FRAMES_MODEL],
      devices: { count: DEVICES, backend: 'sim' },
      worker: { metricsPort: 0 },
      log: { level: 'info' },
    }),
  );
  const fleetLog = join(dir, 'fleet.log');
  const loadLog = join(dir, 'load.log');
  const framesLog = join(dir, 'frames.log');
  console.log(`[${kind}] ${MINUTES} min at ${RATE} req/s and ${STREAMS} cameras at 5 fps, ${DEVICES} workers, judged after a ${(WARM_UP_MS / 1000).toFixed(0)} s warm-up; logs in ${dir}`);

  // The workers' "worker ready" lines name their device and /metrics port; more of them than
  // devices means a worker was restarted.
  const ports = new Map<number, number>();
  let readyLines = 0;
  let pending = '';
  const fleet = spawn(process.execPath, ['bin/npu-fleet.js', 'start', '--config', configFile], {
    env: { ...process.env, NPU_FLEET_DEVICE: 'sim' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const fleetExited = new Promise<number | null>((resolve) => fleet.once('exit', (code) => resolve(code)));
  const onFleetOutput = (b: Buffer): void => {
    appendFileSync(fleetLog, b);
    pending += b.toString();
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.includes('"msg":"worker ready"')) continue;
      try {
        const rec = JSON.parse(line) as { device?: unknown; metricsPort?: unknown };
        if (typeof rec.device === 'number' && typeof rec.metricsPort === 'number') {
          ports.set(rec.device, rec.metricsPort);
          readyLines++;
        }
      } catch {
        // a line interleaved with other output: the next ready line of that worker will do
      }
    }
  };
  fleet.stdout.on('data', onFleetOutput);
  fleet.stderr.on('data', onFleetOutput);
  const killFleet = (): void => {
    try {
      if (fleet.pid !== undefined) process.kill(-fleet.pid, 'SIGKILL');
    } catch {
      // gone already
    }
  };
  process.once('exit', killFleet);

  let load: ChildProcess | undefined;
  let frames: ChildProcess | undefined;
  let redis: Redis | undefined;
  try {
    const readyBy = Date.now() + 120_000;
    while (ports.size < DEVICES) {
      if (fleet.exitCode !== null) throw new Error(`the fleet exited with ${fleet.exitCode} before it was ready; see ${fleetLog}`);
      if (Date.now() > readyBy) throw new Error(`the fleet was not ready after 120 s; see ${fleetLog}`);
      await new Promise((r) => setTimeout(r, 200));
    }

    const seconds = Math.round(MINUTES * 60);
    const loadRun = drive(['load', '--config', configFile, '--model', MODEL, '--rate', String(RATE), '--seconds', String(seconds), '--drain-ms', '15000'], loadLog);
    load = loadRun.child;
    const loadExited = loadRun.exited;
    const loadTail = loadRun.tail;
    const framesRun = drive(
      ['frames', '--config', configFile, '--model', FRAMES_MODEL, '--streams', String(STREAMS), '--fps', '5', '--seconds', String(seconds), '--deadline-ms', '1000', '--drain-ms', '15000'],
      framesLog,
    );
    frames = framesRun.child;
    const framesExited = framesRun.exited;
    const framesTail = framesRun.tail;
    const startedAtMs = Date.now();

    const workers = new Map<number, WorkerSample[]>();
    redis = kind === 'bullmq' ? new Redis(services.redisUrl, { maxRetriesPerRequest: 1 }) : undefined;
    const redisKeys: Array<{ atMs: number; value: number }> = [];
    const redisBytes: Array<{ atMs: number; value: number }> = [];
    const supervisor: ProcessSample[] = [];
    const producer: ProcessSample[] = [];
    let loadCode: number | null | undefined;
    let printedAtMs = startedAtMs;
    void loadExited.then((code) => (loadCode = code));
    while (loadCode === undefined) {
      await Promise.race([new Promise((r) => setTimeout(r, SAMPLE_MS)), loadExited]);
      if (loadCode !== undefined) break;
      const parts: string[] = [];
      for (const [device, port] of [...ports].sort((a, b) => a[0] - b[0])) {
        try {
          const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) });
          const s = parseMetrics(await res.text());
          workers.set(device, [...(workers.get(device) ?? []), s]);
          parts.push(`w${device} rss ${mib(s.rssBytes)} heap ${mib(s.heapUsedBytes)} fds ${s.openFds} lag99 ${(s.lagP99Seconds * 1000).toFixed(0)} ms q ${s.queueDepth}`);
        } catch (e) {
          parts.push(`w${device} scrape failed (${(e as Error).message})`);
        }
      }
      const at = Date.now();
      let redisPart = '';
      if (redis !== undefined) {
        try {
          const [keys, info] = await Promise.all([redis.dbsize(), redis.info('memory')]);
          const used = Number(/used_memory:(\d+)/.exec(info)?.[1]);
          redisKeys.push({ atMs: at, value: keys });
          if (Number.isFinite(used)) redisBytes.push({ atMs: at, value: used });
          redisPart = ` | redis ${keys} keys ${mib(used)}`;
        } catch (e) {
          redisPart = ` | redis failed (${(e as Error).message})`;
        }
      }
      const sup = procRssBytes(fleet.pid);
      const prod = procRssBytes(load.pid);
      if (sup !== undefined) supervisor.push({ atMs: at, rssBytes: sup });
      if (prod !== undefined) producer.push({ atMs: at, rssBytes: prod });
      if (at - printedAtMs < PRINT_MS - SAMPLE_MS / 2) continue;
      printedAtMs = at;
      console.log(
        `[${kind}] ${((at - startedAtMs) / 1000).toFixed(0)} s | ${parts.join(' | ')} | supervisor ${sup === undefined ? '?' : mib(sup)} | load ${prod === undefined ? '?' : mib(prod)}${redisPart}` +
          ` | ${loadTail.at(-1) ?? ''}`,
      );
    }

    console.log(`[${kind}] load: ${loadTail.slice(-2).join(' / ')}`);
    const framesCode = await Promise.race([framesExited, new Promise<string>((r) => setTimeout(() => r('still running 60 s after load'), 60_000))]);
    console.log(`[${kind}] frames: ${framesTail.slice(-2).join(' / ')}`);
    const outOfOrder = /out of order (\d+)/.exec(framesTail.join('\n'))?.[1];
    const fleetCode = await (async () => {
      fleet.kill('SIGTERM');
      return await Promise.race([fleetExited, new Promise<string>((r) => setTimeout(() => r('no exit 60 s after SIGTERM'), 60_000))]);
    })();

    const rows: Growth[] = [];
    const add = (g: Growth | undefined): void => {
      if (g !== undefined) rows.push(g);
    };
    for (const [device, samples] of [...workers].sort((a, b) => a[0] - b[0])) {
      const series = (key: keyof typeof WORKER_SERIES) => samples.map((s) => ({ atMs: s.atMs, value: s[key] }));
      add(growth(`worker ${device} RSS (median)`, series('rssBytes'), startedAtMs, median, 0, mib));
      add(growth(`worker ${device} V8 heap used (floor)`, series('heapUsedBytes'), startedAtMs, min, 0, mib));
      add(growth(`worker ${device} external memory (floor)`, series('externalBytes'), startedAtMs, min, 4 * MIB, mib));
      add(growth(`worker ${device} open fds (max)`, series('openFds'), startedAtMs, max, 64, count));
      add(growth(`worker ${device} active handles (max)`, series('activeHandles'), startedAtMs, max, 64, count));
      add(growth(`worker ${device} device memory (max)`, series('deviceMemoryBytes'), startedAtMs, max, MIB, mib));
      const lag = samples.filter((s) => s.atMs >= startedAtMs + WARM_UP_MS).map((s) => s.lagP99Seconds * 1000);
      if (lag.length > 0) console.log(`[${kind}] worker ${device} event-loop lag p99 after warm-up: median ${median(lag).toFixed(1)} ms, max ${max(lag).toFixed(1)} ms`);
    }
    const procSeries = (xs: readonly ProcessSample[]) => xs.map((s) => ({ atMs: s.atMs, value: s.rssBytes }));
    add(growth('supervisor RSS (median)', procSeries(supervisor), startedAtMs, median, 0, mib));
    add(growth('load generator (Producer) RSS (median)', procSeries(producer), startedAtMs, median, 0, mib));
    add(growth('redis keys (max)', redisKeys, startedAtMs, max, 1000, count));
    add(growth('redis used memory (median)', redisBytes, startedAtMs, median, 8 * MIB, mib));

    const restarts = Math.max(0, readyLines - DEVICES);
    let ok = true;
    console.log(`\n[${kind}] growth, last third vs first third after the warm-up (target ≤ ${GROWTH_TARGET.toFixed(2)}):`);
    for (const r of rows) {
      const pass = r.ratio <= GROWTH_TARGET;
      ok &&= pass;
      console.log(`  ${r.what.padEnd(42)} ${r.ratio.toFixed(3)}  ${pass ? 'PASS' : 'MISS'}  (${r.note})`);
    }
    if (rows.length === 0) {
      ok = false;
      console.log('  too few samples after the warm-up: run longer or sample more often');
    }
    const checks: Array<[string, boolean]> = [
      [`load exit ${String(loadCode)} (0: every request answered, some ok in time)`, loadCode === 0],
      [`frames exit ${String(framesCode)} (0: every frame answered, some ok in time)`, framesCode === 0],
      [`frames ok results out of order: ${outOfOrder ?? '? (no summary)'}`, outOfOrder === '0'],
      [`worker restarts ${restarts}`, restarts === 0],
      [`fleet exit on SIGTERM: ${String(fleetCode)}`, fleetCode === 0],
    ];
    for (const [what, pass] of checks) {
      ok &&= pass;
      console.log(`  ${what.padEnd(60)} ${pass ? 'PASS' : 'MISS'}`);
    }
    console.log(`[${kind}] ${ok ? 'PASS' : 'MISS'}\n`);
    return ok;
  } finally {
    if (load !== undefined && load.exitCode === null) load.kill('SIGKILL');
    if (frames !== undefined && frames.exitCode === null) frames.kill('SIGKILL');
    if (fleet.exitCode === null) killFleet();
    process.removeListener('exit', killFleet);
    await redis?.quit().catch(() => undefined);
  }
}

const only = process.env['BENCH_ONLY'];
const kinds: Kind[] = only === 'kafka' || only === 'bullmq' ? [only] : ['kafka', 'bullmq'];
const results = await withBenchServices(async (services) => {
  const verdicts: boolean[] = [];
  for (const kind of kinds) verdicts.push(await soak(kind, services));
  return verdicts;
});
process.exitCode = results.every(Boolean) ? 0 : 1;
