import { spawnSync } from 'node:child_process';
import { cpSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { TransportSettings } from '../../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../../src/contracts/request-envelope.ts';
import { openDeadLetters } from '../../src/transport/index.ts';
import { dlqCount } from './dlq-count.ts';
import { killFleet, scrapeMetric, startFleet, transportSettings, waitFor, type FleetProcess, type TransportKind } from './fleet-harness.ts';
import { openLoad, type LoadSession } from './fleet-load.ts';

let fleet: FleetProcess | undefined;
let load: LoadSession | undefined;
afterEach(async () => {
  await load?.close().catch(() => {});
  if (fleet) killFleet(fleet.child);
  fleet = undefined;
  load = undefined;
});

const answered = (l: LoadSession, reqs: readonly RequestEnvelope[]) => () => reqs.every((r) => l.results.byId.has(r.id));
const missing = (l: LoadSession, reqs: readonly RequestEnvelope[], f: FleetProcess) => () =>
  `${reqs.filter((r) => !l.results.byId.has(r.id)).length} unanswered; log tail:\n${f.story().slice(-5000)}`;

/**
 * One device whose simulator faults on inputs holding `value`, and 300 good requests with one
 * poison among them (its first input holds the value); returns once every request is answered,
 * with how many times the fault's log line (`events`) appeared and the DLQ's size.
 */
async function poisonDrill(
  kind: TransportKind,
  o: { fault: string; value: number; worker: Record<string, unknown>; events: RegExp; exactlyOnce?: boolean },
): Promise<{ transport: TransportSettings; good: RequestEnvelope[]; poison: RequestEnvelope; events: number; dlq: number }> {
  const base = transportSettings(kind);
  // BullMQ keeps its default two-minute locks: the restarted worker puts back what a dead one held.
  const transport =
    base.kind === 'kafka' && o.exactlyOnce === true
        ? { ...base, kafka: { ...base.kafka, exactlyOnce: true } }
        : base;
  fleet = await startFleet(kind, { models: ['mlp-classifier'], devices: 1, transport, env: { NPU_FLEET_SIM_FAULTS: o.fault }, worker: { maxHangsPerRequest: 2, ...o.worker } });
  load = await openLoad(fleet.transport);
  const good = load.make(300, { priority: 1 });
  const [poison] = load.make(1, { priority: 1, maxSamples: 1, idPrefix: 'poison' });
  if (poison === undefined) throw new Error('no poison request');
  const input = poison.inputs[0]!.data;
  new DataView(input.buffer, input.byteOffset, input.byteLength).setFloat32(12, o.value, true);
  const all = [...good.slice(0, 150), poison, ...good.slice(150)];
  await load.producer.publish(all);
  await waitFor(answered(load, all), 240_000, 'every request answered, the poison one included', missing(load, all, fleet));
  return { transport, good, poison, events: fleet.output().match(o.events)?.length ?? 0, dlq: await dlqCount(fleet.transport, 'mlp-classifier') };
}

describe.each<TransportKind>(['kafka', 'bullmq'])('fleet reliability on %s', (kind) => {
  it('SIGKILL of a worker mid-batch under load: every request still answered, duplicates counted', async () => {
    fleet = await startFleet(kind, {
      models: ['mlp-classifier'],
      env: { NPU_FLEET_SIM_PROFILE: 'base=5ms,perItem=0.5ms' },
      worker: { hangLimitMs: 10_000 },
    });
    load = await openLoad(fleet.transport);
    const reqs = load.make(3000);
    await load.producer.publish(reqs);
    await waitFor(() => load!.results.byId.size >= 600, 120_000, '600 results before the kill', missing(load, reqs, fleet));
    const [victim] = fleet.workerPids();
    expect(victim).toBeTypeOf('number');
    process.kill(victim as number, 'SIGKILL');
    await waitFor(answered(load, reqs), 240_000, 'every request answered after the kill', missing(load, reqs, fleet));
    console.log(`[e2e ${kind}] SIGKILL drill: ${reqs.length} requests, ${load.results.duplicates} duplicate result(s), statuses ${JSON.stringify(load.results.statuses())}`);
    expect(fleet.output()).toMatch(/worker exited; restarting/);
    // The restarted worker takes over at once what the killed one held: BullMQ puts back its jobs
    // (else: when their 2-minute locks lapse); Kafka removes its group member (else: when its
    // session times out).
    if (kind === 'bullmq') expect(fleet.output()).toMatch(/put back the jobs the dead previous worker of this device held/);
    else expect(fleet.output()).toMatch(/removed the dead previous worker's member from its consumer group/);
    expect(load.results.statuses().failed ?? 0).toBe(0);
    for (const r of reqs) expect(load.results.first(r.id)?.status).toBe('ok');
    expect(await fleet.stop()).toBe(0);
  }, 420_000);

  it('slow device: a batch past execTimeoutMs is delivered late and device memory returns to baseline; a hang past the limit restarts the worker and its requests are answered', async () => {
    fleet = await startFleet(kind, {
      models: ['mlp-classifier'],
      copyRepo: true,
      devices: 1,
      env: { NPU_FLEET_SIM_FAULTS: 'slow@2:1500ms,hang@4:60000ms', NPU_FLEET_SIM_FAULTS_FIRST_RUN_ONLY: '1' },
      worker: { hangLimitMs: 4000 }, // execTimeoutMs of the example models is 1000
    });
    load = await openLoad(fleet.transport);
    // Device memory from the worker's own /metrics (total - free, read from the device per scrape).
    const port = fleet.metricsPorts().get(0);
    expect(port).toBeTypeOf('number');
    const memUsed = async (): Promise<number> => {
      const v = await scrapeMetric(port as number, 'npu_fleet_device_memory_used_bytes', { device: '0' });
      if (v === undefined) throw new Error('npu_fleet_device_memory_used_bytes{device="0"} missing from /metrics');
      return v;
    };
    const baseline = await memUsed(); // model loaded, idle
    expect(baseline).toBeGreaterThan(0);
    // One request at a time so execution k is request k.
    const reqs = load.make(12, { priority: 0 });
    const during: number[] = [];
    for (const [i, r] of reqs.slice(0, 3).entries()) {
      await load.producer.publish(r);
      // Execution 2 is the slow one (1.5 s): sample device memory while it is on the device.
      while (i === 1 && !load.results.byId.has(r.id) && during.length < 100) {
        during.push(await memUsed());
        await new Promise((res) => setTimeout(res, 100));
      }
      await waitFor(() => load!.results.byId.has(r.id), 30_000, `result of ${r.id}`, missing(load, reqs, fleet));
    }
    const second = load.results.first(reqs[1]?.id ?? '');
    expect(second?.status).toBe('ok');
    expect(second?.late).toBe(true);
    expect(second?.timings.deviceMs).toBeGreaterThanOrEqual(1400);
    expect(load.results.first(reqs[0]?.id ?? '')?.late).toBeUndefined();
    // Nothing the late batch held may stay allocated once its result is out. Slots are allocated at
    // model load, so the figure should not move at all; poll anyway in case freeing trails the result.
    let after = await memUsed();
    for (const end = Date.now() + 5000; after !== baseline && Date.now() < end; after = await memUsed()) {
      await new Promise((res) => setTimeout(res, 100));
    }
    console.log(
      `[e2e ${kind}] slow device: device memory used baseline ${baseline} B, during the late batch ${Math.min(...during)}..${Math.max(...during)} B (${during.length} scrapes), after ${after} B`,
    );
    expect(during.length).toBeGreaterThan(0);
    expect(after).toBe(baseline);
    // Readings done: the hang below restarts the worker (new process, new device baseline).
    await load.producer.publish(reqs.slice(3));
    await waitFor(answered(load, reqs), 120_000, 'every request answered after the hang restart', missing(load, reqs, fleet));
    expect(fleet.output()).toMatch(/device hang/);
    expect(fleet.output()).toMatch(/worker exited; restarting/);
    for (const r of reqs) expect(load.results.first(r.id)?.status).toBe('ok');
    expect(await fleet.stop()).toBe(0);
  }, 300_000);

  it('hot reload under load: new version switches atomically, removal drains, nothing lost; SIGTERM drains and exits 0', async () => {
    fleet = await startFleet(kind, { models: ['mlp-classifier'], copyRepo: true });
    load = await openLoad(fleet.transport);
    const modelDir = join(fleet.repoDir, 'mlp-classifier');
    const all: RequestEnvelope[] = [];
    let stopLoad = false;
    const pump = (async () => {
      while (!stopLoad) {
        const chunk = load!.make(40);
        all.push(...chunk);
        await load!.producer.publish(chunk);
        await new Promise((r) => setTimeout(r, 25));
      }
    })();
    await waitFor(() => load!.results.byId.size > 200, 60_000, 'steady load');
    cpSync(join(modelDir, '1'), join(modelDir, '2'), { recursive: true });
    await waitFor(() => [...load!.results.byId.values()].some((l) => l[0]?.version === '2'), 60_000, 'results from version 2', () => fleet!.output().slice(-3000));
    rmSync(join(modelDir, '2'), { recursive: true });
    const countAtRemoval = load.results.byId.size;
    await waitFor(() => [...load!.results.byId.values()].slice(countAtRemoval).some((l) => l[0]?.version === '1'), 60_000, 'back on version 1', () => fleet!.output().slice(-3000));
    stopLoad = true;
    await pump;
    // SIGTERM right after the last publish: drain finishes what this fleet took, the rest stays queued.
    expect(await fleet.stop('SIGTERM')).toBe(0);
    expect(fleet.output()).toMatch(/version unloaded/);
    const unanswered = all.filter((r) => !load!.results.byId.has(r.id));
    if (unanswered.length > 0) {
      // Nothing lost: a fresh fleet answers what the drained one left in the broker.
      fleet = await startFleet(kind, { models: ['mlp-classifier'], transport: fleet.transport });
    }
    await waitFor(answered(load, all), 120_000, 'every request answered', missing(load, all, fleet));
    const statuses = load.results.statuses();
    console.log(`[e2e ${kind}] hot reload + drain: ${all.length} requests, statuses ${JSON.stringify(statuses)}, duplicates ${load.results.duplicates}`);
    expect(statuses.failed ?? 0).toBe(0);
    expect(statuses.rejected ?? 0).toBe(0);
    if (fleet.child.exitCode === null) expect(await fleet.stop()).toBe(0);
  }, 300_000);

  it('a poison request that crashes every worker process it reaches is quarantined after worker.maxHangsPerRequest crashes; everything else is answered', async () => {
    const { good, poison, events: crashes, dlq } = await poisonDrill(kind, { fault: 'crash@value=4242', value: 4242, worker: {}, events: /crashes the process/g });
    const verdict = load!.results.first(poison.id);
    console.log(`[e2e ${kind}] crash drill: poison ${verdict?.status} ${verdict?.error?.code}; ${crashes} worker crashes; DLQ ${dlq}; statuses ${JSON.stringify(load!.results.statuses())}`);
    expect(verdict?.status).toBe('failed');
    expect(verdict?.error?.message).toMatch(/hung or its worker died 2 times/);
    expect(crashes).toBe(2); // the first in a full batch, the second alone: then never run again
    expect(fleet!.output()).toMatch(/the previous worker of this device died with a batch on the device/);
    expect(dlq).toBe(1);
    for (const r of good) expect(load!.results.first(r.id)?.status).toBe('ok');
    expect(await fleet!.stop()).toBe(0);
  }, 300_000);

  it('a poison request that hangs every device it reaches is quarantined after worker.maxHangsPerRequest hangs; everything else is answered; replayed from the DLQ once fixed, it is answered ok', async () => {
    const { transport, good, poison, events: hangs, dlq } = await poisonDrill(kind, { fault: 'hang@value=1337:60s', value: 1337, worker: { hangLimitMs: 3000 }, events: /device hang: stopping intake/g });
    if (fleet === undefined || load === undefined) throw new Error('no fleet');
    const verdict = load.results.first(poison.id);
    console.log(`[e2e ${kind}] poison drill: poison ${verdict?.status} ${verdict?.error?.code}; ${hangs} device hangs; DLQ ${dlq}; statuses ${JSON.stringify(load.results.statuses())}`);
    expect(verdict?.status).toBe('failed');
    expect(verdict?.error?.code).toBe('DEVICE_HANG');
    expect(verdict?.error?.message).toMatch(/hung or its worker died 2 times/);
    expect(hangs).toBe(2); // the first in a full batch, the second alone: then never run again
    expect(dlq).toBe(1);
    for (const r of good) expect(load.results.first(r.id)?.status).toBe('ok');
    // Still serving after the quarantine.
    const after = load.make(20, { priority: 0 });
    await load.producer.publish(after);
    await waitFor(answered(load, after), 60_000, 'requests after the quarantine', missing(load, after, fleet));
    expect(await fleet.stop()).toBe(0);

    // The cause fixed (a fleet without the fault), the operator re-drives the quarantined request.
    fleet = await startFleet(kind, { models: ['mlp-classifier'], devices: 1, transport });
    const replay = spawnSync(process.execPath, ['bin/npu-fleet.js', 'dlq', 'replay', '--config', fleet.configFile, '--model', 'mlp-classifier', '--reason', 'DEVICE_HANG'], { encoding: 'utf8', timeout: 120_000 });
    console.log(`[e2e ${kind}] poison drill, replay: ${replay.stdout.trim().split('\n')[0]}`);
    expect(replay.status, replay.stderr + replay.stdout).toBe(0);
    expect(replay.stdout).toMatch(/re-sent 1 of 1 matching dead letter/);
    await waitFor(() => (load?.results.byId.get(poison.id)?.length ?? 0) >= 2, 60_000, 'the replayed request answered', () => fleet!.output().slice(-3000));
    expect(load.results.byId.get(poison.id)?.map((r) => r.status)).toEqual(['failed', 'ok']);
    expect(await fleet.stop()).toBe(0);
  }, 300_000);
});

describe('fleet reliability on kafka with exactlyOnce', () => {
  // Transactional offset commits carry no metadata, so the broker cannot hold hang counts here:
  // the worker's in-flight journal must keep them, or a poison input hangs the device forever.
  const committedDeadLetters = async (transport: TransportSettings): Promise<Record<string, number>> => {
    // Read committed, as a consumer would: the watermarks also count the transactions' markers.
    const letters = openDeadLetters(transport);
    return (await letters.list({ model: 'mlp-classifier' }).finally(() => letters.close())).byReason;
  };

  it('a poison request that crashes every worker process it reaches is quarantined after worker.maxHangsPerRequest crashes', async () => {
    const { transport, good, poison, events: crashes } = await poisonDrill('kafka', { fault: 'crash@value=4242', value: 4242, worker: {}, events: /crashes the process/g, exactlyOnce: true });
    const dlq = await committedDeadLetters(transport);
    const verdict = load!.results.first(poison.id);
    console.log(`[e2e kafka exactlyOnce] crash drill: poison ${verdict?.status} ${verdict?.error?.code}; ${crashes} worker crashes; DLQ ${JSON.stringify(dlq)}; statuses ${JSON.stringify(load!.results.statuses())}`);
    expect(verdict?.error?.message).toMatch(/hung or its worker died 2 times/);
    expect(crashes).toBe(2);
    expect(dlq).toEqual({ DEVICE_HANG: 1 });
    for (const r of good) expect(load!.results.first(r.id)?.status).toBe('ok');
    expect(await fleet!.stop()).toBe(0);
  }, 300_000);

  it('a poison request that hangs every device it reaches is still quarantined after worker.maxHangsPerRequest hangs', async () => {
    const { transport, good, poison, events: hangs } = await poisonDrill('kafka', {
      fault: 'hang@value=1337:60s',
      value: 1337,
      worker: { hangLimitMs: 3000 },
      events: /device hang: stopping intake/g,
      exactlyOnce: true,
    });
    if (fleet === undefined || load === undefined) throw new Error('no fleet');
    const dlq = await committedDeadLetters(transport);
    const verdict = load.results.first(poison.id);
    console.log(`[e2e kafka exactlyOnce] poison drill: poison ${verdict?.status} ${verdict?.error?.code}; ${hangs} device hangs; DLQ ${JSON.stringify(dlq)}; statuses ${JSON.stringify(load.results.statuses())}`);
    expect(verdict?.status).toBe('failed');
    expect(verdict?.error?.code).toBe('DEVICE_HANG');
    expect(verdict?.error?.message).toMatch(/hung or its worker died 2 times/);
    expect(hangs).toBe(2);
    expect(dlq).toEqual({ DEVICE_HANG: 1 });
    for (const r of good) expect(load.results.first(r.id)?.status).toBe('ok');
    expect(fleet.output()).toMatch(/kept in the in-flight journal/);
    expect(await fleet.stop()).toBe(0);
  }, 300_000);
});
