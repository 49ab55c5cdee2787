import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { bullmqSettings, queueJobs } from '../transport/bullmq-harness.ts';
import { idOf, Inbox, makeRequest, outcomeFor, startWith } from '../transport/conformance-kit.ts';
import { kafkaSettings } from '../transport/kafka-harness.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { BullmqTransport } from '../../../src/transport/bullmq/bullmq-transport.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { BullmqDeadLetters } from '../../../src/transport/bullmq/bullmq-dead-letters.ts';
import { KafkaDeadLetters } from '../../../src/transport/kafka/kafka-dead-letters.ts';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.allSettled(open.splice(0).map((x) => x.close()));
});

function cli(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ['bin/npu-fleet.js', ...args], { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('npu-fleet dlq output', () => {
  it('keeps stdout for its answer: client logs (a broker out of reach) go to stderr, so --json output stays parseable', () => {
    const configFile = join(tempDir('npu-fleet-dlq-cli-'), 'fleet.yaml');
    writeFileSync(configFile, stringify({ transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } } }));
    const r = cli(['dlq', 'list', '--config', configFile, '--model', 'm', '--json']);
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/no broker of transport\.kafka\.brokers \(127\.0\.0\.1:1\) answered; check the list/);
  });

  // Every failure to connect read "no broker answered; check transport.kafka.brokers", a refused
  // SASL login too, sending the operator to a broker list that was right.
  it('a refused SASL login names transport.kafka.sasl, not the broker list; an unreachable broker names the list', () => {
    const dir = tempDir('npu-fleet-dlq-cli-');
    const { brokers, username } = getServices().kafkaSasl;
    const saslConfig = join(dir, 'sasl.yaml');
    writeFileSync(saslConfig, stringify({ transport: { kind: 'kafka', kafka: { brokers, sasl: { mechanism: 'plain', username, password: 'not-the-password' } } } }));
    const refused = cli(['dlq', 'list', '--config', saslConfig, '--model', 'm']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/npu-fleet: reading the DLQ topic m\.dlq failed: the brokers refused the SASL login of transport\.kafka\.sasl \(mechanism plain, username fleet\)/);
    expect(refused.stderr).not.toContain('not-the-password');
    const goneConfig = join(dir, 'gone.yaml');
    writeFileSync(goneConfig, stringify({ transport: { kind: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } } }));
    const gone = cli(['dlq', 'replay', '--config', goneConfig, '--model', 'm']);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/no broker of transport\.kafka\.brokers \(127\.0\.0\.1:1\) answered; check the list/);
  });
});

// `dlq list --model` with a misspelt name printed "0 record(s)" and exited 0, the same as for a
// model with a clean DLQ: nothing said the name was wrong. A retired model keeps its dead letters,
// so the name is not refused; an empty DLQ of a model the fleet does not serve says so.
it('an empty DLQ of a model this fleet does not serve says so (list, replay, purge); a served one does not', () => {
  const configFile = join(tempDir('npu-fleet-dlq-cli-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: bullmqSettings() }, models: ['mlp-classifier'] }));
  const hint = /model "mlp-clasifier" is not served by this fleet \(not in its config's models; served: mlp-classifier\): is the name right\?/;
  for (const args of [['list'], ['replay'], ['purge', '--expired']]) {
    const typo = cli(['dlq', ...args, '--config', configFile, '--model', 'mlp-clasifier']);
    expect(typo.code, typo.stderr).toBe(0);
    expect(typo.stdout).toMatch(/\b0 (record\(s\)|matching|of 0)/);
    expect(typo.stdout).toMatch(hint);
    const served = cli(['dlq', ...args, '--config', configFile, '--model', 'mlp-classifier']);
    expect(served.code, served.stderr).toBe(0);
    expect(served.stdout).not.toMatch(/not served/);
  }
  // --json stays one JSON document: the hint goes to stderr there.
  const json = cli(['dlq', 'list', '--config', configFile, '--model', 'mlp-clasifier', '--json']);
  expect(json.code, json.stderr).toBe(0);
  expect(JSON.parse(json.stdout)).toMatchObject({ scanned: 0 });
  expect(json.stderr).toMatch(hint);
}, 60_000);

// A model taken out of the fleet (its directory removed, or dropped from `models`) keeps its dead
// letters; `dlq replay` re-sent them, exit 0, "re-sent 3 of 3", to a queue no worker reads: on
// BullMQ they left the DLQ for good, waiting in a queue nobody serves (QA). `publish` refuses such a
// model (exit 2); replay now does too when it has records to send, and sends nothing.
it('replay refuses (exit 2, nothing sent, records kept) the dead letters of a model this fleet does not serve; --dry-run and list still show them', async () => {
  const bullmq = bullmqSettings();
  const model = uniqueName('retired').replace(/[^A-Za-z0-9-]/g, '');
  const configFile = join(tempDir('npu-fleet-dlq-cli-'), 'fleet.yaml');
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq }, models: ['mlp-classifier'] }));
  const dlq = new Queue(`${model}.dlq`, { connection: { url: bullmq.redisUrl } as never, prefix: bullmq.prefix });
  try {
    await dlq.addBulk(
      ['r0', 'r1', 'r2'].map((id) => ({
        name: 'dead-letter',
        data: { reason: 'INVALID_MESSAGE', message: 'does not fit', source: { queue: `${model}.requests`, jobId: id }, priority: 1, original: { id, model, createdAt: 1, inputs: [] } },
      })),
    );
  } finally {
    await dlq.close();
  }
  const replay = cli(['dlq', 'replay', '--config', configFile, '--model', model]);
  expect(replay.code, replay.stdout + replay.stderr).toBe(2);
  expect(replay.stderr).toMatch(new RegExp(`model "${model}" is not served by this fleet \\(not in its config's models; served: mlp-classifier\\): no worker would read the 3 matching dead letter\\(s\\) re-sent`));
  expect(await queueJobs(bullmq, `${model}.requests`, ['wait', 'prioritized'])).toEqual([]);
  const dry = cli(['dlq', 'replay', '--config', configFile, '--model', model, '--dry-run']);
  expect(dry.code, dry.stderr).toBe(0);
  expect(dry.stdout).toMatch(/would re-send 3 of 3 matching dead letter\(s\)/);
  // The dry run says the real one would be refused.
  expect(dry.stdout).toMatch(new RegExp(`model "${model}" is not served by this fleet .*: a real replay refuses these \\(exit 2\\) until it is deployed`));
  const listed = cli(['dlq', 'list', '--config', configFile, '--model', model]);
  expect(listed.stdout).toMatch(/3 record\(s\)/);
}, 60_000);

/**
 * `npu-fleet dlq` against the real brokers: dead letters written by the transport itself (a model
 * this fleet did not serve, and garbage) are listed by reason, and replaying one reason re-sends
 * exactly those requests to their request topic/queue.
 */
describe.each(['kafka', 'bullmq'] as const)('npu-fleet dlq on %s', (kind) => {
  it('lists dead letters by reason; replay --reason re-sends those to their source; --dry-run sends nothing', async () => {
    const model = uniqueName('dlqcli').replace(/[^A-Za-z0-9-]/g, '');
    const tag = uniqueName('dlqcfg').replace(/[^A-Za-z0-9-]/g, '');
    const kafka = kafkaSettings({ topicTemplate: `${tag}.{model}.requests.p{priority}`, repliesTemplate: `${tag}.{model}.replies`, dlqTemplate: `${tag}.{model}.dlq` });
    const bullmq = bullmqSettings();
    const transport = (): Transport => {
      const t = kind === 'kafka' ? new KafkaTransport(kafka, { partitions: 2, retries: 1 }) : new BullmqTransport(bullmq, { stalledIntervalMs: 500, prefetch: 64 });
      open.push(t);
      return t;
    };
    const producer = kind === 'kafka' ? new KafkaProducer(kafka, { partitions: 2 }) : new BullmqProducer(bullmq);
    open.push(producer);
    const configFile = join(tempDir('npu-fleet-dlq-cli-'), 'fleet.yaml');
    // The fleet of this config serves the model (replay refuses the DLQ of one it does not).
    writeFileSync(configFile, stringify({ transport: kind === 'kafka' ? { kind, kafka } : { kind, bullmq }, models: ['mlp-classifier', model] }));

    const t = transport();
    const inbox = new Inbox();
    await startWith(t, model, inbox);
    await producer.publish([makeRequest(model, 'later-1', 1), makeRequest(model, 'later-2', 2), makeRequest(model, 'bad-1', 1)]);
    const first = await inbox.waitFor(3, 30_000);
    // Two requests for a model not deployed yet (UNKNOWN_MODEL), one invalid: as the runtime answers them.
    await t.settle(
      first.map((d) => {
        const o = outcomeFor(d);
        const unknown = idOf(d).startsWith('later');
        const e = unknown ? new FleetError('UNKNOWN_MODEL', `model ${model} is not served here`) : new FleetError('INVALID_ARGUMENT', 'inputs[0].shape does not fit');
        return { ...o, result: { ...o.result, status: unknown ? ('rejected' as const) : ('invalid' as const), outputs: undefined, error: e.toResultError() }, dlq: { reason: e.code, message: e.message } };
      }),
    );

    const dl = kind === 'kafka' ? new KafkaDeadLetters(kafka) : new BullmqDeadLetters(bullmq);
    open.push(dl);
    const waitForListing = async (): Promise<{ scanned: number; byReason: Readonly<Record<string, number>> }> => {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const listing = await dl.list({ model });
        if (listing.scanned >= 3 || Date.now() > deadline) return listing;
        await new Promise((res) => setTimeout(res, 300));
      }
    };
    expect((await waitForListing()).byReason).toEqual({ UNKNOWN_MODEL: 2, INVALID_ARGUMENT: 1 });
    const json = cli(['dlq', 'list', '--config', configFile, '--model', model, '--json']);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ scanned: 3, matched: 3, byReason: { UNKNOWN_MODEL: 2, INVALID_ARGUMENT: 1 } });
    const text = cli(['dlq', 'list', '--config', configFile, '--model', model, '--reason', 'UNKNOWN_MODEL']);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/3 record\(s\)/);
    expect(text.stdout).toMatch(/by reason: UNKNOWN_MODEL 2, INVALID_ARGUMENT 1/);
    expect(text.stdout).toMatch(/2 matching UNKNOWN_MODEL; the oldest 2:/);
    expect(text.stdout).toMatch(/UNKNOWN_MODEL +id later-1, from \S+ p1/);
    expect(text.stdout).toMatch(/UNKNOWN_MODEL +id later-2, from \S+ p2/);

    const dry = cli(['dlq', 'replay', '--config', configFile, '--model', model, '--reason', 'UNKNOWN_MODEL', '--dry-run']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/would re-send 2 of 2 matching dead letter\(s\) \(3 read\)/);
    // Nothing re-sent: none so far, and the quiet second after the replay's two below also holds
    // anything the dry run sent (it would have come before them), so no window of its own.
    expect(inbox.all, 'sent by the dry run').toHaveLength(3);

    const replay = cli(['dlq', 'replay', '--config', configFile, '--model', model, '--reason', 'UNKNOWN_MODEL']);
    expect(replay.code, replay.stderr + replay.stdout).toBe(0);
    expect(replay.stdout).toMatch(/re-sent 2 of 2 matching dead letter\(s\)/);
    expect(replay.stderr).toMatch(/dlq replay: 3 read, 2 re-sent/);
    const again = (await inbox.waitFor(5, 30_000)).slice(3);
    expect(again.map((d) => [idOf(d), d.priority]).sort()).toEqual([
      ['later-1', 1],
      ['later-2', 2],
    ]);
    expect(await inbox.quietFor(1_000), 'more than the replay\'s two (the dry run\'s or a replay sending twice)').toEqual([]);
    expect(inbox.all).toHaveLength(5);
    await t.settle(again.map(outcomeFor));

    const after = await dl.list({ model });
    expect(after.byReason).toEqual(kind === 'kafka' ? { UNKNOWN_MODEL: 2, INVALID_ARGUMENT: 1 } : { INVALID_ARGUMENT: 1 });
    if (kind === 'kafka') {
      // The Kafka DLQ keeps replayed records, marked: the same replay again re-sends nothing, and says why.
      const rerun = cli(['dlq', 'replay', '--config', configFile, '--model', model, '--reason', 'UNKNOWN_MODEL']);
      expect(rerun.code, rerun.stderr + rerun.stdout).toBe(0);
      expect(rerun.stdout).toMatch(/re-sent 0 of 2 matching dead letter\(s\)/);
      expect(rerun.stdout).toMatch(/passed over 2 already re-sent by an earlier replay/);
      const listed = cli(['dlq', 'list', '--config', configFile, '--model', model, '--reason', 'UNKNOWN_MODEL']);
      expect(listed.stdout).toMatch(/2 matching UNKNOWN_MODEL, 2 of them already replayed; the oldest 2:/);
      expect(listed.stdout).toMatch(/id later-1, .*\(replayed \d{4}-\d\d-\d\dT/);
      expect(await inbox.quietFor(1_000)).toEqual([]);
    }
  }, 180_000);
});
