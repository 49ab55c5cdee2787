// `npu-fleet dlq replay` options against real Redis and Kafka: --priority is checked against the
// model's priority levels as publish checks it; a replay stopped by --limit says so.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import type { IHeaders } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { dlqCommand } from '../../../src/cli/dlq-command.ts';
import { exitCodeOf } from '../../../src/cli/exit-codes.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { toBullmqPriority } from '../../../src/transport/bullmq/bullmq-names.ts';
import { encodeRequest } from '../../../src/codec/index.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';
import { uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { makeRequest } from '../transport/conformance-kit.ts';
import { adminKafka, kafkaSettings } from '../transport/kafka-harness.ts';
import { bullmqSettings, queueJobs } from '../transport/bullmq-harness.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

/** `npu-fleet dlq ARGS` in this process: its exit code (a FleetError as main maps it) and stdout. */
async function dlq(args: readonly string[]): Promise<{ code: number; out: string; error?: string }> {
  const lines: string[] = [];
  try {
    const code = await dlqCommand(args, (l) => lines.push(l));
    return { code, out: lines.join('\n') };
  } catch (err) {
    if (!(err instanceof FleetError)) throw err;
    return { code: exitCodeOf(err), out: lines.join('\n'), error: err.message };
  }
}

/** A BullMQ DLQ of mlp-classifier (3 priority levels in examples/models) under a prefix of its own, with `n` records. */
async function bullmqDlq(n: number, withPriority = true) {
  const bullmq = bullmqSettings();
  const model = 'mlp-classifier';
  const queue = new Queue(`${model}.dlq`, { connection: { url: bullmq.redisUrl } as never, prefix: bullmq.prefix });
  open.push(queue);
  await queue.addBulk(
    Array.from({ length: n }, (_, i) => ({
      name: 'dead-letter',
      data: {
        reason: 'UNKNOWN_MODEL',
        message: 'not served',
        source: { queue: `${model}.requests`, jobId: `r${i}` },
        ...(withPriority ? { priority: 1 } : {}),
        original: { id: `r${i}`, model, createdAt: 1, inputs: [] },
      },
    })),
  );
  const configFile = join(tempDir('npu-fleet-dlq-opt-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq }, models: [model] }));
  return {
    args: ['--config', configFile, '--model', model],
    requests: async () => queueJobs(bullmq, `${model}.requests`, ['wait', 'prioritized']),
    left: async () => (await queue.getJobs(['wait'])).length,
  };
}

// `dlq replay --priority 9` on a 3-level model re-sent the records at priority 9, where the workers
// (3 levels) would not serve them as asked; publish and frames refuse such a priority (exit 2).
it('replay --priority past the model\'s priority levels is refused (exit 2, naming the levels); nothing is sent; one within them is used', async () => {
  const d = await bullmqDlq(2, false);
  const refused = await dlq(['replay', ...d.args, '--priority', '9']);
  expect(refused.code, refused.out).toBe(2);
  expect(refused.error).toMatch(/--priority 9: priority must be from 0 to 2: model mlp-classifier has 3 priority levels, got 9; nothing was sent/);
  expect(await d.requests()).toEqual([]);
  expect(await d.left()).toBe(2);
  // The dry run is refused alike: it would promise what the real run refuses.
  expect((await dlq(['replay', ...d.args, '--priority', '3', '--dry-run'])).code).toBe(2);

  const ok = await dlq(['replay', ...d.args, '--priority', '2']);
  expect(ok.code, ok.out).toBe(0);
  expect(ok.out).toMatch(/re-sent 2 of 2 matching/);
  expect((await d.requests()).map((j) => j.opts.priority)).toEqual([toBullmqPriority(2), toBullmqPriority(2)]);
}, 60_000);

/** A Kafka DLQ of model m (topics of a tag of their own) with `n` records from its p1 topic. */
async function kafkaDlq(n: number) {
  const tag = uniqueName('dopt').replace(/[^A-Za-z0-9-]/g, '');
  const kafka = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
  const [dlqTopic, p1] = [`${tag}.m.dlq`, `${tag}.m.requests.p1`];
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    await createTopicsSettled(admin, [dlqTopic, `${tag}.m.requests.p0`, p1].map((topic) => ({ topic, numPartitions: 1 })));
  } finally {
    await admin.disconnect();
  }
  const producer = adminKafka().producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    const messages = Array.from({ length: n }, (_, i) => ({
      key: `r${i}`,
      value: encodeRequest(makeRequest('m', `r${i}`, 1)),
      headers: { [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${p1}/0/${i}` } as IHeaders,
    }));
    await producer.send({ topic: dlqTopic, messages, acks: -1 });
  } finally {
    await producer.disconnect();
  }
  const configFile = join(tempDir('npu-fleet-dlq-opt-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'kafka', kafka }, models: ['mlp-classifier', 'm'] }));
  return { args: ['--config', configFile, '--model', 'm'] };
}

// `replay --limit 2` of 5 matching records printed "re-sent 2 of 2 matching", as if only 2 matched:
// the replay stops reading at the limit, so how many match beyond it is not known.
describe.each([
  ['bullmq', () => bullmqDlq(5)],
  ['kafka', () => kafkaDlq(5)],
] as const)('dlq replay --limit on %s', (_kind, make) => {
  it('says the limit stopped it and that more may match; a limit not reached reads as before', async () => {
    const d = await make();
    const limited = await dlq(['replay', ...d.args, '--limit', '2']);
    expect(limited.code, limited.out).toBe(0);
    expect(limited.out).toMatch(/^re-sent 2 of the first 2 matching dead letter\(s\) \(3 read\) to their request (queues|topics); stopped at --limit 2: more may match \(dlq list counts them\)$/m);
    const json = await dlq(['replay', ...d.args, '--limit', '1', '--dry-run', '--json']);
    expect(JSON.parse(json.out)).toMatchObject({ replayed: 1, stoppedAtLimit: true });
    const rest = await dlq(['replay', ...d.args, '--limit', '10']);
    expect(rest.code, rest.out).toBe(0);
    expect(rest.out).toMatch(/^re-sent 3 of \d matching dead letter\(s\) \(\d read\)/m);
    expect(rest.out).not.toMatch(/--limit/);
  }, 60_000);
});
