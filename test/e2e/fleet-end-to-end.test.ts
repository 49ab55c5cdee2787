import { spawnSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { loadModelConfig } from '../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../src/contracts/result-envelope.ts';
import { createProducer } from '../../src/producer/index.ts';
import { prng, syntheticRequest } from '../../src/runtime/demo-load.ts';
import { uniqueName } from '../helpers/services.ts';
import { directOutputs, maxRelDiff } from './direct-oracle.ts';
import { killFleet, startFleet, waitFor, type FleetProcess, type TransportKind } from './fleet-harness.ts';

const MODEL_DIR = 'examples/models/mlp-classifier';
const TOTAL = 10_000;

describe.each<TransportKind>(['kafka', 'bullmq'])('fleet end to end on %s', (kind) => {
  let fleet: FleetProcess | undefined;
  afterAll(async () => {
    if (fleet) killFleet(fleet.child);
  });

  it(`${TOTAL} mixed requests through npu-fleet start: one result each, outputs equal the binding's, no device time on expired`, async () => {
    fleet = await startFleet(kind, { models: ['mlp-classifier'] });
    const config = loadModelConfig(`${MODEL_DIR}/config.yaml`);
    const producer = createProducer(fleet.transport, {});
    const replyTo = uniqueName(`${kind}-replies`);
    const results = new Map<string, ResultEnvelope[]>();
    let received = 0;
    const sub = await producer.subscribeReplies(replyTo, (r) => {
      received++;
      const list = results.get(r.id) ?? [];
      list.push(r);
      results.set(r.id, list);
    });
    const rand = prng(7);
    const requests: RequestEnvelope[] = [];
    for (let i = 0; i < TOTAL; i++) {
      requests.push(syntheticRequest(config, i, rand, { idPrefix: `${kind}-e2e`, replyTo, deadlineShare: 0.3, deadlineMs: [1, 400], maxSamples: 4 }));
    }
    const started = Date.now();
    for (let i = 0; i < requests.length; i += 500) {
      // Fresh deadlines at send time so the mix of met / expired deadlines is realistic.
      const chunk = requests.slice(i, i + 500).map((r) => (r.deadlineAt === undefined ? r : { ...r, createdAt: Date.now(), deadlineAt: Date.now() + (r.deadlineAt - r.createdAt) }));
      requests.splice(i, chunk.length, ...chunk);
      await producer.publish(chunk);
    }
    await waitFor(() => results.size >= TOTAL, 240_000, `${TOTAL} results`, () => `${results.size} results; fleet log tail:\n${fleet?.output().slice(-3000)}`);
    const elapsedMs = Date.now() - started;
    await sub.close();
    await producer.close();

    const byStatus: Record<string, number> = {};
    for (const list of results.values()) for (const r of list) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
    console.log(`[e2e ${kind}] ${TOTAL} requests in ${elapsedMs} ms (${((TOTAL * 1000) / elapsedMs).toFixed(0)} req/s); statuses ${JSON.stringify(byStatus)}; duplicates ${received - results.size}`);
    expect(received).toBe(TOTAL); // exactly one result per request
    for (const r of requests) expect(results.get(r.id)?.length, r.id).toBe(1);

    const ok = requests.filter((r) => results.get(r.id)?.[0]?.status === 'ok');
    const expired = [...results.values()].map((l) => l[0] as ResultEnvelope).filter((r) => r.status === 'expired');
    expect(ok.length).toBeGreaterThan(TOTAL * 0.5);
    expect(byStatus.failed ?? 0).toBe(0);
    expect(byStatus.invalid ?? 0).toBe(0);
    for (const r of expired) {
      expect(r.timings.deviceMs).toBe(0);
      expect(r.device).toBe(-1);
      expect(r.gear).toBe(0);
    }
    const oracle = await directOutputs(MODEL_DIR, ok);
    let worst = 0;
    for (const r of ok) {
      const got = results.get(r.id)?.[0];
      const want = oracle.get(r.id) ?? [];
      expect(got?.outputs?.length).toBe(want.length);
      got?.outputs?.forEach((t, j) => {
        const g = new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
        worst = Math.max(worst, maxRelDiff(g, want[j] ?? new Float32Array()));
      });
      expect(got?.batchSize).toBeGreaterThanOrEqual(r.inputs[0]?.shape[0] ?? 1);
      expect(got?.gear).toBeGreaterThanOrEqual(got?.batchSize ?? 0);
      expect(got?.version).toBe('1');
    }
    expect(worst).toBeLessThan(1e-4);

    // The publish CLI against the same fleet: request-and-await-reply, one JSON line per reply.
    const cli = spawnSync(process.execPath, ['bin/npu-fleet.js', 'publish', '--config', fleet.configFile, '--model', 'mlp-classifier', '--count', '3', '--priority', '0', '--await', '--timeout-ms', '30000'], { encoding: 'utf8', timeout: 60_000 });
    expect(cli.status, cli.stderr).toBe(0);
    const replies = cli.stdout.trim().split('\n').map((l) => JSON.parse(l) as { status: string; outputs: Array<{ shape: number[] }> });
    expect(replies).toHaveLength(3);
    for (const r of replies) {
      expect(r.status).toBe('ok');
      expect(r.outputs[0]?.shape[1]).toBe(10);
    }

    const code = await fleet.stop('SIGTERM');
    expect(code).toBe(0);

    // Supervisor and worker logs: one JSON object per line, each binding once (a child logger of
    // a logger already bound to a key prints that key twice).
    const logLines = fleet.output().split('\n').filter((l) => l.startsWith('{'));
    expect(logLines.some((l) => l.includes('"component":"worker"') && l.includes('"msg":"worker ready"'))).toBe(true);
    for (const line of logLines) {
      expect(() => JSON.parse(line) as unknown, line).not.toThrow();
      for (const key of ['component', 'device', 'pid']) expect(line.split(`"${key}":`).length - 1, line).toBeLessThanOrEqual(1);
    }
  }, 420_000);
});
