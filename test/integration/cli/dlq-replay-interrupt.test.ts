// `npu-fleet dlq replay` stopped by SIGINT/SIGTERM part way, on real Kafka and Redis: it exited
// 130 by the signal's default action, saying nothing of what it had re-sent (BullMQ: the record in
// hand stayed claimed, so the next replay within 120 s skipped it, exit 1; Kafka: the last progress
// line was up to 1000 records behind). Now it stops between records (Kafka: transactions), says
// exactly how many it re-sent and that running it again is safe, exits 130, and the next run
// re-sends the rest at once, each record once.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import type { IHeaders } from 'kafkajs';
import { afterEach, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { dlqCommand } from '../../../src/cli/dlq-command.ts';
import { decodeRequest, encodeRequest } from '../../../src/codec/index.ts';
import { replayTransactionalId } from '../../../src/transport/kafka/replay-producer.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';
import { uniqueName } from '../../helpers/services.ts';
import { spawnCli } from '../../helpers/spawn-cli.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';
import { makeRequest } from '../transport/conformance-kit.ts';
import { adminKafka, kafkaSettings } from '../transport/kafka-harness.ts';
import { readCommitted, transactionsSettled } from '../transport/kafka-topic-reader.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

/** Spawns `dlq replay ARGS`, sends `signal` once `started()` says a first record went out, and returns how it ended. */
async function interrupted(args: readonly string[], started: () => Promise<boolean>, signal: NodeJS.Signals): Promise<{ code: number | null; output: string; resent: number }> {
  const { child, exited, output } = spawnCli(['dlq', 'replay', ...args]);
  try {
    const deadline = Date.now() + 30_000;
    while (!(await started()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    child.kill(signal);
    const end = await Promise.race([exited, new Promise<'no exit'>((r) => setTimeout(() => r('no exit'), 20_000))]);
    expect(end, output()).not.toBe('no exit');
    const said = new RegExp(`interrupted by ${signal}: dlq replay re-sent (\\d+) record\\(s\\)`).exec(output());
    expect(said, output()).not.toBeNull();
    return { code: (end as { code: number | null }).code, output: output(), resent: Number(said?.[1]) };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

/** `npu-fleet dlq ARGS` in this process: its exit code and stdout. */
async function dlq(args: readonly string[]): Promise<{ code: number; out: string }> {
  const lines: string[] = [];
  const code = await dlqCommand(args, (l) => lines.push(l));
  return { code, out: lines.join('\n') };
}

it('bullmq: SIGINT part way stops between records, says exactly how many were re-sent, exits 130, leaves no claim; the next replay re-sends the rest at once', async () => {
  const n = 300;
  const bullmq = bullmqSettings();
  const model = uniqueName('dint').replace(/[^A-Za-z0-9-]/g, '');
  const dlqQueue = new Queue(`${model}.dlq`, { connection: { url: bullmq.redisUrl } as never, prefix: bullmq.prefix });
  const requests = new Queue(`${model}.requests`, { connection: { url: bullmq.redisUrl } as never, prefix: bullmq.prefix });
  const redis = new Redis(bullmq.redisUrl);
  open.push(dlqQueue, requests, { close: async () => void redis.disconnect() });
  await dlqQueue.addBulk(
    Array.from({ length: n }, (_, i) => ({
      name: 'dead-letter',
      data: { reason: 'UNKNOWN_MODEL', message: 'not served', source: { queue: `${model}.requests`, jobId: `r${i}` }, priority: 1, original: { id: `r${i}`, model, priority: 1, createdAt: 1, inputs: [] } },
    })),
  );
  const configFile = join(tempDir('npu-fleet-dlq-int-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq }, models: [model] }));
  const args = ['--config', configFile, '--model', model];
  const queued = async (): Promise<number> => (await requests.getJobCountByTypes('wait', 'prioritized', 'active', 'completed', 'failed'));

  const run = await interrupted(args, async () => (await queued()) > 0, 'SIGINT');
  expect(run.code, run.output).toBe(130);
  expect(run.output).toMatch(/running the same replay again is safe/);
  expect(run.resent).toBeGreaterThan(0);
  expect(run.resent, 'finished before the signal: make the DLQ bigger').toBeLessThan(n);
  expect(await queued()).toBe(run.resent);
  expect(await dlqQueue.getJobCountByTypes('wait')).toBe(n - run.resent);
  expect(await redis.keys(`${bullmq.prefix}:*replay-claim`), 'a claim left behind').toEqual([]);

  const rest = await dlq(['replay', ...args]);
  expect(rest.code, rest.out).toBe(0);
  expect(rest.out).toMatch(new RegExp(`^re-sent ${n - run.resent} of ${n - run.resent} matching`, 'm'));
  const ids = (await requests.getJobs(['wait', 'prioritized'])).map((j) => (j.data as { id: string }).id);
  expect(new Set(ids).size).toBe(n);
  expect(ids).toHaveLength(n);
}, 60_000);

it('kafka: SIGTERM part way stops between transactions, says exactly how many were re-sent, exits 130; the next replay re-sends the rest, each once', async () => {
  const n = 600;
  const tag = uniqueName('dint').replace(/[^A-Za-z0-9-]/g, '');
  const kafka = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  const [dlqTopic, p1] = [`${tag}.m.dlq`, `${tag}.m.requests.p1`];
  const admin = adminKafka().admin();
  await admin.connect();
  open.push({ close: () => admin.disconnect() });
  await createTopicsSettled(admin, [dlqTopic, `${tag}.m.requests.p0`, p1].map((topic) => ({ topic, numPartitions: 1 })));
  // ~8 KB each: about 110 re-sends per transaction (900 KiB), so the replay takes a dozen of them.
  const pad = 'x'.repeat(8_000);
  const producer = adminKafka().producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    for (let from = 0; from < n; from += 100) {
      const messages = Array.from({ length: Math.min(100, n - from) }, (_, k) => {
        const i = from + k;
        const headers: IHeaders = { [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${p1}/0/${i}`, 'x-pad': pad };
        return { key: `r${i}`, value: encodeRequest(makeRequest('m', `r${i}`, 1)), headers };
      });
      await producer.send({ topic: dlqTopic, messages, acks: -1 });
    }
  } finally {
    await producer.disconnect();
  }
  const configFile = join(tempDir('npu-fleet-dlq-int-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'kafka', kafka }, models: ['mlp-classifier', 'm'] }));
  const args = ['--config', configFile, '--model', 'm'];
  // The first transaction's records are in the request topic (committed or not): the replay is sending.
  const sending = async (): Promise<boolean> => (await admin.fetchTopicOffsets(p1)).some((p) => Number(p.high) > 0);

  const run = await interrupted(args, sending, 'SIGTERM');
  expect(run.code, run.output).toBe(130);
  expect(run.output).toMatch(/running the same replay again is safe/);
  expect(run.resent).toBeGreaterThan(0);
  expect(run.resent, 'finished before the signal: make the DLQ bigger').toBeLessThan(n);
  await transactionsSettled(replayTransactionalId(dlqTopic));
  expect(await readCommitted(p1)).toHaveLength(run.resent);

  const rest = await dlq(['replay', ...args]);
  expect(rest.code, rest.out).toBe(0);
  expect(rest.out).toMatch(new RegExp(`^re-sent ${n - run.resent} of ${n} matching`, 'm'));
  expect(rest.out).toMatch(new RegExp(`passed over ${run.resent} already re-sent by an earlier replay`));
  await transactionsSettled(replayTransactionalId(dlqTopic));
  const ids = (await readCommitted(p1)).map((m) => decodeRequest(m.value ?? Buffer.alloc(0)).id);
  expect(ids).toHaveLength(n);
  expect(new Set(ids).size).toBe(n);
}, 60_000);
