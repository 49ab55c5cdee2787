import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../../src/cli/main.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

// A BullMQ config whose Redis cannot answer: every case below must fail before connecting (the
// connect failure would say "did not answer"), so none of them needs a server.
const dir = tempDir('npu-fleet-publish-');
const config = join(dir, 'fleet.yaml');
writeFileSync(config, 'transport:\n  kind: bullmq\n  bullmq: { redisUrl: "redis://127.0.0.1:1", connectTimeoutMs: 300 }\n');
const requestFile = (name: string, body: unknown): string => {
  const path = join(dir, name);
  writeFileSync(path, typeof body === 'string' ? body : JSON.stringify(body));
  return path;
};
const goodRequest = { id: 'r1', model: 'mlp-classifier', inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: Buffer.alloc(256).toString('base64') }] };

let stderr: string[] = [];
let stdout: string[] = [];
beforeEach(() => {
  stderr = [];
  stdout = [];
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (stderr.push(String(chunk)), true));
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => (stdout.push(String(chunk)), true));
});
afterEach(() => vi.restoreAllMocks());

describe('npu-fleet publish argument checks (before anything is sent)', () => {
  it.each([
    [['--count', 'abc'], '--count must be an integer from 1 to 1000000, got "abc"'],
    [['--count=0'], '--count must be an integer from 1 to 1000000, got "0"'],
    [['--priority', 'high'], '--priority must be an integer >= 0, got "high"'],
    [['--priority', '3'], 'priority must be from 0 to 2: model mlp-classifier has 3 priority levels, got 3'],
    [['--deadline-ms', '0'], '--deadline-ms must be a positive whole number of milliseconds, got "0"'],
    // deadlineAt is whole epoch ms: a fraction made every request invalid, naming deadlineAt, not the flag.
    [['--deadline-ms', '2.5'], '--deadline-ms must be a positive whole number of milliseconds, got "2.5"'],
    [['--timeout-ms', 'x'], '--timeout-ms must be a positive number of milliseconds, got "x"'],
    [['--bogus'], 'unknown option --bogus (run npu-fleet publish --help)'],
    // --await reads each result on a private inbox, which replaces the reply address: the flag was silently dropped.
    [['--await', '--reply-to', 'scores'], '--reply-to sends the results to scores, but --await reads them on its own private inbox: drop one of them (subscribe to scores to read them there)'],
    [['extra'], 'unexpected argument "extra" (run npu-fleet publish --help)'],
    // Each request got an invalid record naming replyTo on "line 1" (there was no file) and the run exited 1.
    [['--reply-to', 'bad:name'], '--reply-to: "bad:name" is not a legal BullMQ queue name (1..249 chars, no \':\')'],
  ])('%j exits 2 naming the flag', async (args, message) => {
    expect(await main(['publish', '--config', config, '--model', 'mlp-classifier', ...args])).toBe(2);
    expect(stderr.join('')).toBe(`npu-fleet: ${message}\n`);
  });

  it('--file: unreadable, not JSON, invalid request, priority past the levels, or mixed with --model', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--file', join(dir, 'missing.json')], /--file .*missing\.json cannot be read \(ENOENT\)/],
      // A data set (.jsonl) that is not there failed "npu-fleet: Error: ENOENT: no such file or directory, open ..." with exit 1.
      [['--file', join(dir, 'missing.jsonl'), '--await', '--out', join(dir, 'missing-results.jsonl')], /^npu-fleet: --file .*missing\.jsonl cannot be read \(ENOENT\)\n$/],
      [['--file', dir], /^npu-fleet: --file .* cannot be read \(EISDIR\)\n$/],
      [['--file', requestFile('bad.json', '{oops')], /--file .*bad\.json is not JSON: .*; it holds one request as JSON/],
      [['--file', requestFile('short.json', { ...goodRequest, inputs: [{ ...goodRequest.inputs[0], data: 'AAAA' }] })], /--file .*short\.json: inputs\[0\]\.data holds 3 bytes but float32 \[1,64\] needs 256/],
      [['--file', requestFile('prio.json', { ...goodRequest, priority: 7 })], /priority must be from 0 to 2: model mlp-classifier has 3 priority levels, got 7/],
      [['--file', requestFile('ok.json', goodRequest), '--model', 'mlp-classifier'], /--file publishes the requests in the file; drop --model and --count/],
    ];
    for (const [args, message] of cases) {
      stderr = [];
      expect(await main(['publish', '--config', config, ...args])).toBe(2);
      expect(stderr.join('')).toMatch(message);
    }
  });

  // A --file line for a model outside the config's `models` is recorded invalid; --model of one was
  // published and, with no worker reading it, waited out --timeout-ms.
  it('--model not among the config\'s models is refused before connecting, as a --file line of it is', async () => {
    const restricted = join(dir, 'fleet-models.yaml');
    writeFileSync(restricted, 'transport:\n  kind: bullmq\n  bullmq: { redisUrl: "redis://127.0.0.1:1", connectTimeoutMs: 300 }\nmodels: [mlp-classifier]\n');
    expect(await main(['publish', '--config', restricted, '--model', 'text-classifier', '--await'])).toBe(2);
    expect(stderr.join('')).toBe(
      'npu-fleet: model: "text-classifier" is not served by this fleet (not in its config\'s models; served: mlp-classifier): no worker would read it, and it would wait out --timeout-ms; fix the model\'s name\n',
    );
  });

  it('--out naming the --file itself is refused: results appended to the file being read were read back as bad lines, without end', async () => {
    const data = requestFile('same.jsonl', `${JSON.stringify(goodRequest)}\n`);
    for (const out of [data, join(dir, '.', 'same.jsonl')]) {
      stderr = [];
      expect(await main(['publish', '--config', config, '--file', data, '--await', '--out', out, '--resume'])).toBe(2);
      expect(stderr.join('')).toMatch(/--out .*same\.jsonl is the --file being read: name another file for the results/);
    }
  });

  it('--await on Kafka with a transport.kafka.clientId that cannot name the private inbox is refused up front, naming the setting', async () => {
    const kafkaConfig = join(dir, 'kafka-bad-client.yaml');
    writeFileSync(kafkaConfig, 'transport:\n  kind: kafka\n  kafka: { brokers: ["127.0.0.1:1"], clientId: "team/scorer" }\n');
    expect(await main(['publish', '--config', kafkaConfig, '--model', 'mlp-classifier', '--count', '3', '--await'])).toBe(2);
    expect(stderr.join('')).toMatch(/^npu-fleet: transport\.kafka\.clientId: clientId "team\/scorer" cannot name this producer's private inbox/);
  });

  it('a valid file request without createdAt gets past every check to the transport', async () => {
    // Reaching the (unreachable) Redis proves the file parsed and createdAt was filled in.
    expect(await main(['publish', '--config', config, '--file', requestFile('no-created.json', goodRequest)])).toBe(1);
    expect(stderr.join('')).toMatch(/Redis at 127\.0\.0\.1:1 did not answer within 300 ms/);
  });

  it('a file request for a model the repository at hand lacks is refused before connecting, naming the field and the models there', async () => {
    // It went to a queue no worker reads (here: to the unreachable Redis, "did not answer").
    expect(await main(['publish', '--config', config, '--file', requestFile('unknown-model.json', { ...goodRequest, model: 'mlp-clasifier' })])).toBe(2);
    expect(stderr.join('')).toMatch(/^npu-fleet: model: "mlp-clasifier" is not served by this fleet \(not in (\/.*\/)?examples\/models; served: mlp-classifier, small-cnn, text-classifier\): no worker would read it/);
    expect(stderr.join('')).not.toMatch(/did not answer/);
    // The repository not at hand (publish runs elsewhere): the model cannot be judged, and passes.
    const elsewhere = join(dir, 'elsewhere.yaml');
    writeFileSync(elsewhere, `modelRepository: ${join(dir, 'no-repository-here')}\ntransport:\n  kind: bullmq\n  bullmq: { redisUrl: "redis://127.0.0.1:1", connectTimeoutMs: 300 }\n`);
    stderr = [];
    expect(await main(['publish', '--config', elsewhere, '--file', requestFile('unknown-model.json', { ...goodRequest, model: 'mlp-clasifier' })])).toBe(1);
    expect(stderr.join('')).toMatch(/did not answer within 300 ms/);
  });

  it('the long phases before a data set goes out (reading --out to resume, counting lines, the repeat check) print progress', async () => {
    // Tens of millions of lines took minutes in each phase without a word. The interval is faked and
    // advanced at every turn of the event loop, so each phase, however fast here, spans many.
    const data = join(dir, 'phases.jsonl');
    const out = join(dir, 'phases-out.jsonl');
    const n = 20_000;
    writeFileSync(data, Array.from({ length: n }, (_, i) => JSON.stringify({ ...goodRequest, id: `p${i}` })).join('\n'));
    writeFileSync(out, Array.from({ length: n / 2 }, (_, i) => JSON.stringify({ id: `p${i}`, status: 'ok', line: i + 1 })).join('\n'));
    const isTTY = Object.getOwnPropertyDescriptor(process.stderr, 'isTTY');
    Object.defineProperty(process.stderr, 'isTTY', { value: true, configurable: true });
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      let finished = false;
      const run = main(['publish', '--config', config, '--file', data, '--await', '--out', out, '--resume']).finally(() => (finished = true));
      while (!finished) {
        await new Promise((resolve) => setImmediate(resolve));
        vi.advanceTimersByTime(1_000);
      }
      // The run itself then fails on the unreachable Redis.
      expect(await run).toBe(1);
    } finally {
      vi.useRealTimers();
      if (isTTY === undefined) Reflect.deleteProperty(process.stderr, 'isTTY');
      else Object.defineProperty(process.stderr, 'isTTY', isTTY);
    }
    const text = stderr.join('');
    expect(text).toMatch(/^publish: reading .*phases-out\.jsonl to resume: [1-9]\d* lines, \d+% of the file, \d+\/s(, ~\d+ s left)?$/m);
    expect(text).toMatch(/^publish: counting the lines of .*phases\.jsonl: [1-9]\d* lines, \d+% of the file, \d+\/s(, ~\d+ s left)?$/m);
    expect(text).toMatch(new RegExp(`^publish: checking the ids of .*phases\\.jsonl for repeats: [1-9]\\d* of ${n} lines, \\d+/s(, ~\\d+ s left)?$`, 'm'));
  });

  describe('--resume of an --out written for another data file', () => {
    const data = (name: string, ids: string[]): string => requestFile(name, ids.map((id) => JSON.stringify({ ...goodRequest, id })).join('\n'));
    const results = (name: string, recs: Array<{ id: string; status: string; line?: number }>): string => requestFile(name, recs.map((r) => JSON.stringify(r)).join('\n') + '\n');

    // It was accepted: every line of the new file was sent and appended, so RESULTS held two data
    // sets, and a line done in both had two ok records.
    it('is refused (exit 2) before anything is sent when none of its records names an id of the file', async () => {
      const file = data('resume-other.jsonl', ['x1', 'x2', 'x3']);
      const out = results('resume-other-out.jsonl', [
        { id: 'a1', status: 'ok', line: 1 },
        { id: 'a2', status: 'failed', line: 2 },
        { id: 'a3', status: 'ok', line: 3 },
      ]);
      expect(await main(['publish', '--config', config, '--file', file, '--await', '--out', out, '--resume'])).toBe(2);
      const text = stderr.join('');
      expect(text).toContain(`npu-fleet: --out ${out} was written for another file: none of its 3 records matches a line of ${file} (wrong --out or --file?)`);
      expect(text).not.toMatch(/did not answer/);
      // The same by id: results written by an earlier version (no line), and a .json array file.
      stderr = [];
      const noLines = results('resume-other-nolines.jsonl', [{ id: 'a1', status: 'ok' }]);
      expect(await main(['publish', '--config', config, '--file', file, '--await', '--out', noLines, '--resume'])).toBe(2);
      expect(stderr.join('')).toMatch(/was written for another file: none of its 1 records matches a line of/);
      stderr = [];
      const array = requestFile('resume-other.json', [{ ...goodRequest, id: 'x1' }, { ...goodRequest, id: 'x2' }]);
      expect(await main(['publish', '--config', config, '--file', array, '--await', '--out', out, '--resume'])).toBe(2);
      expect(stderr.join('')).toMatch(/was written for another file: none of its 3 records matches an item of/);
    });

    it('a genuine resume passes: records of lines of the file (one is enough: the file edited since, lines moved), or records without an id', async () => {
      const file = data('resume-same.jsonl', ['x1', 'x2', 'x3', 'x4']);
      const cases = [
        results('resume-same-out.jsonl', [{ id: 'x1', status: 'ok', line: 1 }]),
        // x3 moved to line 1 (lines above it removed), a1 gone from the file.
        results('resume-moved-out.jsonl', [
          { id: 'a1', status: 'ok', line: 1 },
          { id: 'x3', status: 'failed', line: 1 },
        ]),
        // Only lines that were not requests (invalid, no id): nothing to judge by.
        results('resume-noid-out.jsonl', [{ id: '', status: 'invalid', line: 2 }]),
      ];
      for (const out of cases) {
        stderr = [];
        // Past every check to the (unreachable) Redis.
        expect(await main(['publish', '--config', config, '--file', file, '--await', '--out', out, '--resume'])).toBe(1);
        expect(stderr.join('')).toMatch(/did not answer within 300 ms/);
      }
    });
  });

  it('--await with a broker that does not answer stops before reading a line: exit 1 naming the setting, no record, nothing counted published', async () => {
    // It read and "published" the lines (the progress line said so), wrote a failed record for
    // each of the first 1,000, and none for those read after.
    const data = requestFile('wrong-broker.jsonl', Array.from({ length: 1200 }, (_, i) => JSON.stringify({ ...goodRequest, id: `w${i}` })).join('\n'));
    const out = join(dir, 'wrong-broker-out.jsonl');
    expect(await main(['publish', '--config', config, '--file', data, '--await', '--out', out])).toBe(1);
    const text = stderr.join('');
    expect(text).toMatch(/^npu-fleet: publishing stopped after 0 requests, before reading a line: the bullmq producer could not open its reply inbox \(nothing was sent\): .*Redis at 127\.0\.0\.1:1 did not answer within 300 ms/m);
    expect(text).not.toMatch(/[1-9]\d* published/);
    // No record, and no RESULTS left behind: it was made by this run and nothing was written to
    // it. Left empty, the same command run again once the broker was fixed was refused, exit 2
    // ("--out exists: add --resume"), for a run that had sent nothing.
    expect(existsSync(out)).toBe(false);
    stderr.splice(0);
    expect(await main(['publish', '--config', config, '--file', data, '--await', '--out', out])).toBe(1);
    expect(stderr.join('')).not.toMatch(/exists: add --resume/);
    // A RESULTS that was there before (a --resume) is kept as it was.
    writeFileSync(out, '');
    expect(await main(['publish', '--config', config, '--file', data, '--await', '--out', out, '--resume'])).toBe(1);
    expect(readFileSync(out, 'utf8')).toBe('');
  });

  it('a Kafka broker that never answers: exit 1 naming the brokers setting, before any note on an abandoned close', async () => {
    // The close note came first, and the reason the run stopped only after it.
    const kafka = join(dir, 'wrong-kafka.yaml');
    writeFileSync(kafka, 'transport:\n  kind: kafka\n  kafka: { brokers: ["127.0.0.1:1"] }\n');
    const data = requestFile('wrong-kafka.jsonl', JSON.stringify({ ...goodRequest, id: 'k1' }));
    const out = join(dir, 'wrong-kafka-out.jsonl');
    expect(await main(['publish', '--config', kafka, '--file', data, '--await', '--out', out, '--timeout-ms', '5000'])).toBe(1);
    const text = stderr.join('');
    const stopped = text.indexOf('publishing stopped after 0 requests, before reading a line');
    expect(stopped, text).toBeGreaterThanOrEqual(0);
    expect(text).toMatch(/transport\.kafka\.brokers/);
    // Whether the close is abandoned depends on where kafkajs is in its retries when the run ends.
    const closeNote = text.indexOf('producer did not finish');
    if (closeNote >= 0) expect(closeNote, text).toBeGreaterThan(stopped);
    expect(existsSync(out)).toBe(false);
  }, 30_000);

  it('--priority past a model of the --file is refused before anything is sent (exit 2), as it is with --model', async () => {
    // The run started and each line got an invalid record naming the priority, exit 4.
    const lines = [JSON.stringify({ ...goodRequest, id: 'p1' }), JSON.stringify({ ...goodRequest, id: 'p2', model: 'small-cnn' })];
    const data = requestFile('prio-flag.jsonl', lines.join('\n'));
    const array = requestFile('prio-flag.json', lines.map((l) => JSON.parse(l) as unknown));
    for (const file of [data, array]) {
      stderr = [];
      const out = join(dir, `prio-flag-out-${file.endsWith('.json') ? 'array' : 'lines'}.jsonl`);
      expect(await main(['publish', '--config', config, '--file', file, '--priority', '9', '--await', '--out', out])).toBe(2);
      expect(stderr.join('')).toMatch(/^npu-fleet: --priority 9: priority must be from 0 to \d: model (mlp-classifier|small-cnn) has \d priority levels, got 9/);
      expect(stderr.join('')).not.toMatch(/did not answer/);
      expect(existsSync(out)).toBe(false);
    }
    // Within the levels of every model of the file: past the checks to the (unreachable) Redis.
    stderr = [];
    expect(await main(['publish', '--config', config, '--file', data, '--priority', '1', '--await', '--out', join(dir, 'prio-flag-ok.jsonl')])).toBe(1);
    expect(stderr.join('')).toMatch(/did not answer within 300 ms/);
  });

  it('--out in a directory that does not exist exits 2 (nothing was done) naming --out and the directory', async () => {
    const data = requestFile('nodir-data.jsonl', JSON.stringify(goodRequest));
    const out = join(dir, 'nodir', 'x.jsonl');
    expect(await main(['publish', '--config', config, '--file', data, '--await', '--out', out])).toBe(2);
    expect(stderr.join('')).toBe(`npu-fleet: --out ${out} cannot be written: its directory ${join(dir, 'nodir')} does not exist (create it, or name a file in an existing directory)\n`);
  });

  it('--help prints the publish usage and exits 0', async () => {
    expect(await main(['publish', '--help'])).toBe(0);
    expect(stdout.join('')).toMatch(/npu-fleet publish --model NAME .*\n.*--file REQUEST\.json/);
  });
});
