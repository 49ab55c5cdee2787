// Runs `npu-fleet start` as a real process tree (supervisor + one worker process per simulated
// device) against the test run's Kafka or Redis, with unique topic/queue names per test.
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, cpSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { TransportSettings } from '../../src/contracts/fleet-config.ts';
import { parseFleetConfig } from '../../src/contracts/config-loader.ts';
import { getServices, uniqueName } from '../helpers/services.ts';

export type TransportKind = 'kafka' | 'bullmq';

export interface FleetProcess {
  readonly child: ChildProcess;
  readonly configFile: string;
  readonly repoDir: string;
  readonly transport: TransportSettings;
  readonly output: () => string;
  readonly story: () => string;
  /** Resolves with the supervisor's exit code. */
  readonly exited: Promise<number | null>;
  /** PIDs of worker processes, from their log lines. */
  workerPids(): number[];
  /** /metrics port per device, from the workers' "worker ready" lines (a restarted worker's latest). */
  metricsPorts(): Map<number, number>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface FleetOptions {
  devices?: number;
  /** Env for the simulator: NPU_FLEET_SIM_PROFILE, NPU_FLEET_SIM_FAULTS... */
  env?: Record<string, string>;
  worker?: Record<string, unknown>;
  /** Copy examples/models into a temp repo (hot-reload tests modify it). */
  copyRepo?: boolean;
  models?: string[];
  /** Reuse another fleet's topics/queues (e.g. a second fleet taking over after a drain). */
  transport?: TransportSettings;
}

const live = new Set<ChildProcess>();

/** SIGKILLs a fleet's whole process group (supervisor and workers): nothing outlives a test. */
export function killFleet(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

process.once('exit', () => {
  for (const child of live) killFleet(child);
});

export function transportSettings(kind: TransportKind): TransportSettings {
  const prefix = uniqueName(`e2e-${kind}`).replace(/[^a-zA-Z0-9-]/g, '-');
  if (kind === 'kafka') {
    return parseFleetConfig({
      transport: {
        kind: 'kafka',
        kafka: {
          brokers: getServices().kafkaBrokers,
          sessionTimeoutMs: 10_000,
          groupId: `${prefix}-workers`,
          clientId: prefix,
          topicTemplate: `${prefix}.{model}.requests.p{priority}`,
          repliesTemplate: `${prefix}.{model}.replies`,
          dlqTemplate: `${prefix}.{model}.dlq`,
        },
      },
    }).transport;
  }
  return parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } } }).transport;
}

export async function startFleet(kind: TransportKind, options: FleetOptions = {}): Promise<FleetProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'npu-fleet-e2e-'));
  const repoDir = options.copyRepo ? join(dir, 'models') : join(process.cwd(), 'examples/models');
  if (options.copyRepo) cpSync(join(process.cwd(), 'examples/models'), repoDir, { recursive: true });
  const transport = options.transport ?? transportSettings(kind);
  const config = {
    transport,
    modelRepository: repoDir,
    ...(options.models ? { models: options.models } : {}),
    devices: { count: options.devices ?? 2, backend: 'sim' },
    worker: { metricsPort: 0, drainTimeoutMs: 20_000, hangLimitMs: 10_000, ...options.worker },
    supervisor: { restartBackoffMinMs: 200, restartBackoffMaxMs: 2000 },
    log: { level: 'info' },
  };
  const configFile = join(dir, 'fleet.yaml');
  writeFileSync(configFile, stringify(config));
  let out = '';
  const child = spawn(process.execPath, ['bin/npu-fleet.js', 'start', '--config', configFile], {
    cwd: process.cwd(),
    env: { ...process.env, NPU_FLEET_DEVICE: 'sim', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    // Own process group, so a test can kill the supervisor and its workers together.
    detached: true,
  });
  live.add(child);
  child.once('exit', () => live.delete(child));
  // Everything the fleet prints is kept in fleet.log beside its config, for post-mortems.
  const logFile = join(dir, 'fleet.log');
  const keep = (b: Buffer): void => {
    out += b.toString();
    appendFileSync(logFile, b);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const fleet: FleetProcess = {
    child,
    configFile,
    repoDir,
    transport,
    output: () => out,
    // Fleet log lines without the broker client's chatter: what a failure message should show.
    story: () => `(full log: ${logFile})\n` + out.split('\n').filter((l) => !l.includes('"logger":"kafkajs"')).join('\n'),
    exited,
    workerPids: () => {
      const pids = new Set<number>();
      for (const m of out.matchAll(/"pid":(\d+)[^\n]*"msg":"worker ready"/g)) pids.add(Number(m[1]));
      return [...pids];
    },
    metricsPorts: () => {
      const ports = new Map<number, number>();
      for (const line of out.split('\n')) {
        if (!line.includes('"msg":"worker ready"')) continue;
        try {
          const rec = JSON.parse(line) as { device?: unknown; metricsPort?: unknown };
          if (typeof rec.device === 'number' && typeof rec.metricsPort === 'number') ports.set(rec.device, rec.metricsPort);
        } catch {
          // a line interleaved with other output: skip it
        }
      }
      return ports;
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null) child.kill(signal);
      return exited;
    },
  };
  // Ready when every device's worker logged "worker ready".
  const deadline = Date.now() + 90_000;
  while ((out.match(/"msg":"worker ready"/g) ?? []).length < (options.devices ?? 2)) {
    if (child.exitCode !== null) throw new Error(`fleet exited with ${child.exitCode} before it was ready:\n${out.slice(-4000)}`);
    if (Date.now() > deadline) {
      killFleet(child);
      throw new Error(`fleet not ready after 90 s:\n${out.slice(-4000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return fleet;
}

export async function waitFor(cond: () => boolean, timeoutMs: number, what: string, diag: () => string = () => ''): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${diag()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * One sample from a worker's /metrics: the first series named `name` whose labels include all of
 * `labels` (undefined when absent).
 */
export async function scrapeMetric(port: number, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  if (res.status !== 200) throw new Error(`GET :${port}/metrics answered ${res.status}`);
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of (await res.text()).split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const i = line.lastIndexOf(' ');
    const series = line.slice(0, i);
    if (wanted.every((w) => series.includes(`{${w}`) || series.includes(`,${w}`))) return Number(line.slice(i + 1));
  }
  return undefined;
}
