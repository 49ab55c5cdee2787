// Dead letters whose request deadline has passed (npu-fleet dlq replay, real Kafka and Redis): a
// plain replay skips them, says why per record and exits 3 (only expired left, not a failure);
// --refresh-deadline re-sends them with deadline now + D at their priority, still naming their
// DLQ record; a record skipped for a cause to fix exits 1.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import type { IHeaders } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { dlqCommand } from '../../../src/cli/dlq-command.ts';
import { decodeRequest, encodeRequest } from '../../../src/codec/index.ts';
import { replayTransactionalId } from '../../../src/transport/kafka/replay-producer.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { bullmqSettings, queueJobs } from '../transport/bullmq-harness.ts';
import { makeRequest } from '../transport/conformance-kit.ts';
import { adminKafka, kafkaSettings } from '../transport/kafka-harness.ts';
import { readCommitted, transactionsSettled } from '../transport/kafka-topic-reader.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

/** One DLQ record to write: its request id, deadline (undefined: none) and whether its source is a real request topic/queue. */
interface Dead {
  readonly id: string;
  readonly deadlineAt: number | undefined;
  readonly strangeSource?: boolean;
}

/** A re-sent request as the workers would read it, with the DLQ record it names. */
interface Resent {
  readonly id: string;
  readonly priority: number | undefined;
  readonly deadlineAt: number | undefined;
  readonly replayOf: string;
}

interface Dlq {
  readonly configFile: string;
  readonly model: string;
  write(records: readonly Dead[]): Promise<void>;
  /** Every request re-sent to the model's priority-1 request topic/queue so far. */
  resent(): Promise<Resent[]>;
}

async function kafkaDlq(): Promise<Dlq> {
  const tag = uniqueName('dexp').replace(/[^A-Za-z0-9-]/g, '');
  const model = 'm';
  const kafka = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  const dlq = `${tag}.m.dlq`;
  const p1 = `${tag}.m.requests.p1`;
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    await createTopicsSettled(admin, [dlq, `${tag}.m.requests.p0`, p1].map((topic) => ({ topic, numPartitions: 1 })));
  } finally {
    await admin.disconnect();
  }
  const configFile = join(tempDir('npu-fleet-dlq-exp-'), 'fleet.yaml');
  // The fleet of this config serves the model: replay refuses the dead letters of one it does not.
  writeFileSync(configFile, stringify({ transport: { kind: 'kafka', kafka }, models: ['mlp-classifier', model] }));
  return {
    configFile,
    model,
    write: async (records) => {
      // Idempotent: a retried send on a busy broker must not write a record twice.
      const producer = adminKafka().producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      try {
        const messages = records.map((r, n) => {
          const source = r.strangeSource === true ? `${tag}.elsewhere` : p1;
          const headers: IHeaders = { [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${source}/0/${n}` };
          const request = makeRequest(model, r.id, 1, r.deadlineAt === undefined ? {} : { deadlineAt: r.deadlineAt });
          return { key: r.id, value: encodeRequest(request), headers };
        });
        await producer.send({ topic: dlq, messages, acks: -1 });
      } finally {
        await producer.disconnect();
      }
    },
    resent: async () => {
      await transactionsSettled(replayTransactionalId(dlq));
      return (await readCommitted(p1)).map((m) => {
        const request = decodeRequest(m.value ?? Buffer.alloc(0));
        return { id: request.id, priority: request.priority, deadlineAt: request.deadlineAt, replayOf: String(m.headers[HEADERS.replayOf]) };
      });
    },
  };
}

async function bullmqDlq(): Promise<Dlq> {
  const bullmq = bullmqSettings();
  const model = uniqueName('dexp').replace(/[^A-Za-z0-9-]/g, '');
  const queue = new Queue(`${model}.dlq`, { connection: { url: bullmq.redisUrl } as never, prefix: bullmq.prefix });
  open.push(queue);
  const configFile = join(tempDir('npu-fleet-dlq-exp-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq }, models: ['mlp-classifier', model] }));
  return {
    configFile,
    model,
    write: async (records) => {
      for (const r of records) {
        await queue.add('dead-letter', {
          reason: 'UNKNOWN_MODEL',
          message: 'not served',
          source: { queue: r.strangeSource === true ? `${model}.elsewhere` : `${model}.requests`, jobId: r.id },
          priority: 1,
          original: { id: r.id, model, priority: 1, createdAt: 1, inputs: [], ...(r.deadlineAt === undefined ? {} : { deadlineAt: r.deadlineAt }) },
        });
      }
    },
    resent: async () =>
      (await queueJobs(bullmq, `${model}.requests`, ['wait', 'prioritized'])).map((j) => {
        const data = j.data as { id: string; priority: number; deadlineAt?: number };
        return { id: data.id, priority: data.priority, deadlineAt: data.deadlineAt, replayOf: j.name.replace(/^request replay-of /, '') };
      }),
  };
}

/** `npu-fleet dlq ARGS` in this process: its exit code and stdout. */
async function dlq(args: readonly string[]): Promise<{ code: number; out: string }> {
  const lines: string[] = [];
  const code = await dlqCommand(args, (l) => lines.push(l));
  return { code, out: lines.join('\n') };
}

describe.each([
  ['kafka', kafkaDlq],
  ['bullmq', bullmqDlq],
] as const)('dlq replay of expired records on %s', (_kind, make) => {
  it('skips them saying why per record and exits 3; --refresh-deadline re-sends them with now + D at their priority, naming their record', async () => {
    const d = await make();
    const args = ['replay', '--config', d.configFile, '--model', d.model];
    await d.write([
      { id: 'old-1', deadlineAt: Date.now() - 60_000 },
      { id: 'live-1', deadlineAt: undefined },
      { id: 'old-2', deadlineAt: Date.now() - 1_000 },
    ]);
    const plain = await dlq(args);
    expect(plain.code, plain.out).toBe(3);
    expect(plain.out).toMatch(/re-sent 1 of 3 matching/);
    expect(plain.out.match(/skipped \S+: its deadline passed at \S+; re-sent as it is it would only be answered expired/g)).toHaveLength(2);
    expect(plain.out).toMatch(/only expired records are left \(2\)/);
    expect((await d.resent()).map((r) => r.id)).toEqual(['live-1']);

    const dry = await dlq([...args, '--refresh-deadline', '30s', '--dry-run']);
    expect(dry.code, dry.out).toBe(0);
    expect(dry.out.match(/would refresh \S+: its deadline \S+ had passed; re-sent with deadline/g)).toHaveLength(2);
    expect(await d.resent()).toHaveLength(1);

    const before = Date.now();
    const refreshed = await dlq([...args, '--refresh-deadline', '30s']);
    const after = Date.now();
    expect(refreshed.code, refreshed.out).toBe(0);
    expect(refreshed.out.match(/refreshed \S+: its deadline \S+ had passed; re-sent with deadline/g)).toHaveLength(2);
    const sent = (await d.resent()).filter((r) => r.id.startsWith('old'));
    expect(sent.map((r) => r.id).sort()).toEqual(['old-1', 'old-2']);
    for (const r of sent) {
      expect(r.priority).toBe(1);
      expect(r.deadlineAt).toBeGreaterThanOrEqual(before + 30_000);
      expect(r.deadlineAt).toBeLessThanOrEqual(after + 30_000);
      expect(r.replayOf).toMatch(/\.dlq\//);
    }
    // Nothing left to do: a scheduled replay exits 0, naming each record it passed over (Kafka keeps them) and why.
    const rerun = await dlq(args);
    expect(rerun.code, rerun.out).toBe(0);
    if (_kind === 'kafka') expect(rerun.out.match(/passed over \S+: an earlier replay re-sent it at /g)).toHaveLength(3);

    // A record skipped for a cause to fix is a failure: exit 1.
    await d.write([{ id: 'lost-1', deadlineAt: undefined, strangeSource: true }]);
    const failing = await dlq(args);
    expect(failing.code, failing.out).toBe(1);
    expect(failing.out).toMatch(/skipped \S+: its source \S+ is not a request topic\/queue/);
  }, 120_000);
});

describe.each([
  ['kafka', kafkaDlq],
  ['bullmq', bullmqDlq],
] as const)('dlq purge --expired on %s', (kind, make) => {
  it('discards only the records whose deadline passed, naming each; replays then pass them over and exit 0', async () => {
    const d = await make();
    const common = ['--config', d.configFile, '--model', d.model];
    await d.write([
      { id: 'old-1', deadlineAt: Date.now() - 60_000 },
      { id: 'live-1', deadlineAt: undefined },
      { id: 'old-2', deadlineAt: Date.now() - 1_000 },
    ]);
    await expect(dlq(['purge', ...common])).rejects.toThrow(/dlq purge discards only records whose deadline passed: give --expired/);
    await expect(dlq(['replay', ...common, '--expired'])).rejects.toThrow(/--expired belongs to `dlq purge`/);

    const dry = await dlq(['purge', ...common, '--expired', '--dry-run']);
    expect(dry.code, dry.out).toBe(0);
    expect(dry.out).toMatch(/would discard 2 of 3 matching dead letter\(s\) \(3 read\) whose deadline passed; kept 1/);
    expect(dry.out.match(/would discard \S+: its deadline passed at /g)).toHaveLength(2);
    const listed = await dlq(['list', ...common]);
    expect(listed.out).toMatch(/3 record\(s\)/);

    const purge = await dlq(['purge', ...common, '--expired']);
    expect(purge.code, purge.out).toBe(0);
    expect(purge.out).toMatch(/discarded 2 of 3 matching dead letter\(s\) \(3 read\) whose deadline passed; kept 1/);
    expect(purge.out.match(/discarded \S+: its deadline passed at /g)).toHaveLength(2);
    const after = await dlq(['list', ...common]);
    if (kind === 'kafka') {
      // The log keeps them: list says when they were purged.
      expect(after.out.match(/\(purged \d{4}-\d\d-\d\dT/g)).toHaveLength(2);
    } else expect(after.out).toMatch(/1 record\(s\)/);

    const replay = await dlq(['replay', ...common]);
    expect(replay.code, replay.out).toBe(0);
    expect(replay.out).toMatch(/re-sent 1 of \d matching/);
    if (kind === 'kafka') expect(replay.out.match(/passed over \S+: discarded by dlq purge at /g)).toHaveLength(2);
    expect((await d.resent()).map((r) => r.id)).toEqual(['live-1']);
    // Purged again: nothing left to discard.
    const again = await dlq(['purge', ...common, '--expired']);
    expect(again.code, again.out).toBe(0);
    expect(again.out).toMatch(/discarded 0 of/);
  }, 120_000);
});
