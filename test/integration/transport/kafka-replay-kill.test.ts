// A Kafka DLQ replay SIGKILLed mid-transaction (a real child process: no abort, no disconnect)
// leaves a transaction open on the broker. Every replay of a DLQ topic uses one transactional id
// (replay-producer.ts), so the next replay fences it at start: the broker aborts it at once, not
// after its transaction timeout (kafkajs' default 60 s), and the next replay re-sends exactly what
// the killed one did not commit.
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { IHeaders } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import { uniqueName } from '../../helpers/services.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';
import { replayTransactionalId } from '../../../src/transport/kafka/replay-producer.ts';
import { readCommitted, transactionsSettled } from './kafka-topic-reader.ts';
import { createTopicsSettled } from '../../helpers/create-topics.ts';

const here = dirname(fileURLToPath(import.meta.url));
const children: ChildProcess[] = [];
const open: KafkaDeadLetters[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

/** kafkajs' default transactionTimeout: what an orphaned transaction would block read_committed readers for. */
const TRANSACTION_TIMEOUT_MS = 60_000;

describe('a Kafka DLQ replay killed mid-transaction', () => {
  it('is fenced by the next replay at once: that one finishes well inside the transaction timeout, every record re-sent once', async () => {
    const tag = uniqueName('krk').replace(/[^A-Za-z0-9-]/g, '');
    const settings = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
    const dlq = `${tag}.m.dlq`;
    const sources = [`${tag}.m.requests.p0`, `${tag}.m.requests.p1`];
    const admin = adminKafka().admin();
    await admin.connect();
    try {
      await createTopicsSettled(admin, [dlq, ...sources].map((topic) => ({ topic, numPartitions: 2 })));
    } finally {
      await admin.disconnect();
    }
    // Ten records over the DLQ's two partitions: the replay sends one transaction per partition.
    const values = Array.from({ length: 10 }, (_, n) => `r${n}`);
    // Idempotent: a retried send on a busy broker must not write a record twice.
    const writer = adminKafka().producer({ idempotent: true, maxInFlightRequests: 1 });
    await writer.connect();
    try {
      const messages = values.map((value, n) => {
        const headers: IHeaders = { [HEADERS.dlqReason]: 'UNKNOWN_MODEL', [HEADERS.dlqMessage]: 'not served', [HEADERS.dlqSource]: `${sources[n % 2] ?? ''}/0/${n}` };
        return { key: `k${n}`, value, headers, partition: n % 2 };
      });
      await writer.send({ topic: dlq, messages, acks: -1 });
    } finally {
      await writer.disconnect();
    }

    const child = spawn(process.execPath, ['--import', 'tsx', join(here, 'fixtures/kafka-replay-held.ts'), JSON.stringify(settings), 'm'], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    let out = '';
    child.stdout?.on('data', (b: Buffer) => (out += b.toString()));
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    const heldBy = Date.now() + 60_000;
    while (!out.includes('holding')) {
      if (Date.now() > heldBy) throw new Error(`the replay process never held its transaction open: ${out}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    child.kill('SIGKILL');
    expect(await exited).toBe('SIGKILL');

    const startedAt = Date.now();
    const dl = new KafkaDeadLetters(settings);
    open.push(dl);
    const report = await dl.replay({ model: 'm' });
    const tookMs = Date.now() - startedAt;
    // The killed one's first partition committed with its markers; its second was aborted.
    expect(report).toMatchObject({ matched: 10, replayed: 5, alreadyReplayed: 5, skipped: [] });
    expect(tookMs).toBeLessThan(TRANSACTION_TIMEOUT_MS / 3);
    // A commit returns before its markers are written: wait for this replay's last (not the killed one's, fenced already).
    await transactionsSettled(replayTransactionalId(dlq));
    // read_committed readers (the workers) see each record once, and are not held at the open transaction's first offset.
    const readFrom = Date.now();
    const seen = (await Promise.all(sources.map((t) => readCommitted(t, 20_000)))).flat().map((m) => m.value?.toString() ?? '');
    expect(seen.sort()).toEqual([...values].sort());
    expect(Date.now() - readFrom).toBeLessThan(20_000);
    expect(await new KafkaDeadLetters(settings).replay({ model: 'm' })).toMatchObject({ replayed: 0, alreadyReplayed: 10 });
    console.log(`next replay after SIGKILL mid-transaction: ${tookMs} ms`);
  }, 180_000);
});
