import { closeSync, existsSync, fstatSync, openSync, readFileSync, statSync } from 'node:fs';
import { loadFleetConfig } from '../contracts/config-loader.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import type { ModelConfig } from '../contracts/model-config.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { answeredCount, BULK_CHUNK, bulkPublish, DEFAULT_IN_FLIGHT, newBulkStats } from '../producer/bulk-publish.ts';
import { createProducer } from '../producer/index.ts';
import type { Producer } from '../producer/producer.ts';
import { localModelConfigs, modelFitCheck } from '../producer/model-fit.ts';
import { privateInbox } from '../producer/private-inbox.ts';
import { findRepeatCandidates, NO_ID_REPEATS, type RepeatCandidates } from '../producer/repeat-candidates.ts';
import { checkRequests } from '../producer/request-check.ts';
import type { LineCounter } from '../producer/line-counter.ts';
import { countRequests, isJsonLines, maxLineBytes, readRequestFile, type FileEntry } from '../producer/request-file.ts';
import { prng, syntheticRequest } from '../runtime/demo-load.ts';
import { replyToProblem, replyTopicPattern } from '../transport/names.ts';
import { scanRepository } from '../runtime/model-repository.ts';
import { closeWithin } from './bounded-close.ts';
import { servedModelCheck } from './served-models.ts';
import { clientLogger } from './client-logger.ts';
import { EXIT, exitCodeOf } from './exit-codes.ts';
import { intOption, msOption, noPositionals, parseCommandArgs, wholeMsOption } from './cli-args.ts';
import { OutLock } from './out-lock.ts';
import { withPhaseProgress } from './phase-progress.ts';
import { progressLine, readResumeState, ResultFile, summaryLine, type ResumeState } from './publish-output.ts';
import { refusePriorityPastLevels } from './priority-levels.ts';
import { onStdoutClosed, printLine } from './stdout-lines.ts';

/**
 * `npu-fleet publish`: synthetic requests that fit the model's config (or one JSON request file),
 * fire-and-forget or request-and-await-reply. Prints one JSON line per reply when awaiting.
 */
export async function publishCommand(args: readonly string[]): Promise<number> {
  let lock: OutLock | undefined;
  // Until the run's own handlers take over: the phases before the first publish (reading --out to
  // resume, counting the lines, the ids' first pass) take minutes for tens of millions of lines,
  // and a stop signal then killed the process by default (SIGTERM: exit 143, nothing said,
  // RESULTS.lock left behind). Nothing has been sent yet, so there is nothing to close.
  const beforeRun = (signal: NodeJS.Signals): void => {
    lock?.release();
    process.stderr.write(`npu-fleet: interrupted by ${signal} before publishing started: nothing was sent\n`);
    process.exit(EXIT.interrupted);
  };
  const running = (): void => {
    process.off('SIGINT', beforeRun);
    process.off('SIGTERM', beforeRun);
  };
  process.once('SIGINT', beforeRun);
  process.once('SIGTERM', beforeRun);
  try {
    return await runPublish(args, (out) => (lock = OutLock.take(out)), running);
  } finally {
    running();
    lock?.release();
  }
}

/**
 * The command; `lockOut` keeps a second run off --out until this one has ended, however it ends;
 * `running` is called once nothing is left to do before the producer is made.
 */
async function runPublish(args: readonly string[], lockOut: (out: string) => void, running: () => void): Promise<number> {
  const parsed = parseCommandArgs('publish', args, {
    config: { type: 'string' },
    model: { type: 'string' },
    count: { type: 'string' },
    priority: { type: 'string' },
    'deadline-ms': { type: 'string' },
    await: { type: 'boolean', default: false },
    file: { type: 'string' },
    'timeout-ms': { type: 'string', default: '30000' },
    'reply-to': { type: 'string' },
    out: { type: 'string' },
    resume: { type: 'boolean', default: false },
    'in-flight': { type: 'string' },
  });
  if (parsed === undefined) return 0;
  const { values, positionals } = parsed;
  noPositionals('publish', positionals);
  // Every flag is checked before anything connects: a typo must not publish half a run.
  if (values.file !== undefined && (values.model !== undefined || values.count !== undefined)) {
    throw new FleetError('INVALID_ARGUMENT', '--file publishes the requests in the file; drop --model and --count');
  }
  if (values.out !== undefined && !values.await) {
    throw new FleetError('INVALID_ARGUMENT', '--out records the replies: add --await', { details: { field: 'out' } });
  }
  if (values.await && values['reply-to'] !== undefined) {
    const to = values['reply-to'];
    throw new FleetError('INVALID_ARGUMENT', `--reply-to sends the results to ${to}, but --await reads them on its own private inbox: drop one of them (subscribe to ${to} to read them there)`, {
      details: { field: 'reply-to' },
    });
  }
  if (values.file !== undefined && values.out !== undefined && sameFile(values.file, values.out)) {
    throw new FleetError('INVALID_ARGUMENT', `--out ${values.out} is the --file being read: name another file for the results`, { details: { field: 'out' } });
  }
  if (values.resume && values.out === undefined) {
    throw new FleetError('INVALID_ARGUMENT', '--resume continues an --out FILE: name it', { details: { field: 'resume' } });
  }
  if (values.file !== undefined) checkReadable(values.file);
  const count = values.count === undefined ? 1 : intOption('count', values.count, 1, 1_000_000);
  const priority = values.priority === undefined ? undefined : intOption('priority', values.priority, 0);
  const deadlineMs = values['deadline-ms'] === undefined ? undefined : wholeMsOption('deadline-ms', values['deadline-ms']);
  const timeoutMs = msOption('timeout-ms', values['timeout-ms']);
  const inFlight = values['in-flight'] === undefined ? DEFAULT_IN_FLIGHT : intOption('in-flight', values['in-flight'], 1, 100_000);
  const config = loadFleetConfig({ file: values.config });
  if (config.transport.kind === 'memory') {
    throw new FleetError('INVALID_ARGUMENT', 'publish needs a Kafka or BullMQ transport in --config (the memory broker lives inside `npu-fleet start`)');
  }
  // Else each request of the run would be refused on its own (an invalid record per line).
  if (values.await && config.transport.kind === 'kafka') {
    const refusal = privateInbox('kafka', config.transport.kafka.clientId).refusal;
    if (refusal !== undefined) throw new FleetError('INVALID_CONFIG', `transport.kafka.clientId: ${refusal.message}`, { details: { field: 'transport.kafka.clientId' } });
  }
  // Else every request of the run would be refused on its own, each an invalid record naming replyTo.
  if (values['reply-to'] !== undefined) {
    const pattern = config.transport.kind === 'kafka' ? replyTopicPattern(config.transport.kafka.replyTopicPattern) : undefined;
    const problem = replyToProblem(config.transport.kind, values['reply-to'], pattern);
    if (problem !== undefined) throw new FleetError('INVALID_ARGUMENT', `--reply-to: ${problem}`, { details: { field: 'reply-to' } });
  }
  const override = (r: RequestEnvelope): void => {
    if (priority !== undefined) r.priority = priority;
    if (deadlineMs !== undefined) r.deadlineAt = Date.now() + deadlineMs;
    if (values['reply-to']) r.replyTo = values['reply-to'];
  };
  // Counting, checking and resuming a data set of tens of millions of lines take minutes: each
  // such phase says how far it is, as the run does (each second on a terminal).
  const progressEveryMs = process.stderr.isTTY ? 1_000 : 10_000;
  const phase = <T>(what: string, path: string, totalLines: number | undefined, run: (progress: LineCounter) => Promise<T>): Promise<T> =>
    withPhaseProgress(what, { write: (line) => void process.stderr.write(line), intervalMs: progressEveryMs, totalLines, totalBytes: sizeOf(path) }, run);
  // Before --out is read: a second run resumed at once would send every line this one sends.
  if (values.out !== undefined) lockOut(values.out);
  // Read before the data set's first pass, which checks a resume by line against it.
  let resumed: ResumeState | undefined;
  const resumeFrom = values.resume && values.out !== undefined && existsSync(values.out) ? values.out : undefined;
  if (resumeFrom !== undefined) {
    const byLine = values.file !== undefined && isJsonLines(values.file);
    resumed = await phase(`reading ${resumeFrom} to resume`, resumeFrom, undefined, (progress) => readResumeState(resumeFrom, { byLine, progress }));
    if (resumed.note !== undefined) process.stderr.write(`npu-fleet: ${resumed.note}\n`);
  }
  // Priority levels and default by model, for settlePriorities; the synthetic path has its model at hand.
  const levels = new Map<string, PriorityConfig | undefined>();
  const checkServed = servedModelCheck(config.modelRepository, config.models);
  let source: { entries: AsyncIterable<FileEntry>; total: number | undefined; prepare?: (r: RequestEnvelope) => void; progress: boolean; repeats?: RepeatCandidates } | undefined;
  const requests: RequestEnvelope[] = [];
  /** Ids of --out's records (resumed.sample) found in the data file: none, and --out was written for another file. */
  let sampleMatched = 0;
  /** The models the lines of a data set name (a handful): --priority is checked against each before anything is sent. */
  const fileModels = new Set<string>();
  if (values.file !== undefined && isManyRequestsFile(values.file)) {
    // A data set: read as a stream, each request checked as it goes out; a bad one is recorded
    // as invalid and the run goes on.
    const file = values.file;
    // Each line against its model's config.yaml where the repository is at hand (skipped where it is
    // not): a line the workers would refuse is recorded invalid naming its line, and never sent.
    const fitsModel = modelFitCheck(localModelConfigs(config.modelRepository), config.modelRepository);
    const total = isJsonLines(file) ? await phase(`counting the lines of ${file}`, file, undefined, (progress) => countRequests(file, progress)) : await countRequests(file);
    source = {
      entries: readRequestFile(file, config.limits),
      total,
      progress: true,
      // Holding every id of a 50-million-line file to refuse repeats took gigabytes: a first pass
      // finds the few ids that may repeat, and only those are remembered. (A JSON array is in
      // memory whole anyway.)
      ...(isJsonLines(file)
        ? {
            repeats: await phase(`checking the ids of ${file} for repeats`, file, total, (progress) =>
              findRepeatCandidates(file, total, {
                maxBytes: maxLineBytes(config.limits),
                progress,
                onId:
                  resumed === undefined
                    ? undefined
                    : (line, id) => {
                        resumed?.lines?.checkInput(line, id);
                        if (resumed?.sample.has(id) === true) sampleMatched++;
                      },
                onModel: (model) => fileModels.add(model),
              }),
            ),
          }
        : {}),
      prepare: (r) => {
        override(r);
        checkServed(r.model);
        checkRequests([r], config.transport.kind, config.limits);
        settlePriorities([r], config.modelRepository, levels);
        fitsModel(r);
      },
    };
  } else if (values.file !== undefined) {
    requests.push(await requestFromFile(values.file, config.limits));
  } else {
    if (!values.model) throw new FleetError('INVALID_ARGUMENT', '--model NAME is required (or --file REQUESTS)');
    const model = findModel(config.modelRepository, values.model);
    if (!model) throw new FleetError('UNKNOWN_MODEL', `model ${values.model} is not in ${config.modelRepository}`);
    checkServed(model.name);
    levels.set(model.name, model);
    if (priority !== undefined) settlePriorities([{ model: model.name, priority }], config.modelRepository, levels);
    // Made as they are sent, a chunk at a time: --count 1000000 built up front held every tensor
    // (gigabytes for an image model) and went out as one publish.
    source = { entries: syntheticEntries(model, count, override), total: count, progress: count > BULK_CHUNK, repeats: NO_ID_REPEATS };
  }
  // A JSON array has no first pass: its items, in memory anyway, are looked over here.
  const sample = resumed?.sample;
  if (values.file !== undefined && !isJsonLines(values.file) && (priority !== undefined || (sample?.records ?? 0) > 0)) {
    if (source === undefined) {
      for (const r of requests) fileModels.add(r.model);
      if (sample !== undefined) sampleMatched = requests.filter((r) => sample.has(r.id)).length;
    } else {
      for await (const e of readRequestFile(values.file, config.limits)) {
        const [id, model] = 'request' in e ? [e.request.id, e.request.model] : [e.id, e.model];
        if (model !== undefined) fileModels.add(model);
        if (sample?.has(id ?? '') === true) sampleMatched++;
      }
    }
  }
  // An --out written for another data file, resumed, had every line of this one appended to it.
  if (sample !== undefined && resumeFrom !== undefined && values.file !== undefined) {
    const refusal = sample.refusal(resumeFrom, values.file, sampleMatched, isJsonLines(values.file) ? 'line' : 'item');
    if (refusal !== undefined) throw refusal;
  }
  // --priority applies to every line: past a model's levels, each of its lines was refused on its own (exit 4).
  if (priority !== undefined && values.file !== undefined) {
    for (const model of fileModels) {
      try {
        settlePriorities([{ model, priority }], config.modelRepository, levels);
      } catch (err) {
        const e = FleetError.from(err, 'INVALID_ARGUMENT');
        throw new FleetError(e.code, `--priority ${priority}: ${e.message}; nothing was sent`, { cause: err, details: { field: 'priority' } });
      }
    }
  }
  // Lines done are trusted only for the data set they were recorded from: one edited since (a line
  // removed shifts every later line) would skip lines never answered.
  if (resumed?.lines !== undefined && !resumed.lines.inputMatches() && resumeFrom !== undefined) {
    const twice = resumed.lines.linesRecordedTwice;
    const why = twice > 0 ? `${resumeFrom} records more than one id for ${twice} line(s) of ${values.file ?? ''} (edited between runs)` : `${values.file ?? ''} does not hold the ids ${resumeFrom} recorded for its lines (edited since?)`;
    process.stderr.write(`npu-fleet: ${why}: resuming by id, which holds every id done in memory (about 100 B each)\n`);
    resumed = await phase(`reading ${resumeFrom} again to resume by id`, resumeFrom, undefined, (progress) => readResumeState(resumeFrom, { byLine: false, progress }));
  }
  if (source === undefined) {
    requests.forEach(override);
    for (const r of requests) checkServed(r.model);
    settlePriorities(requests, config.modelRepository, levels);
  }
  const out = values.out === undefined ? undefined : await ResultFile.open(values.out, values.resume, resumed);
  // From here on something may be sent: the run's own handlers (below, before anything awaits) say how far it got.
  running();
  const producer = createProducer(config.transport, { limits: config.limits, log: clientLogger(config) });
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => (closing ??= producer.close());
  if (!values.await && source === undefined) {
    try {
      await producer.publish(requests);
      printLine(`published ${requests.length} request(s)`);
      return EXIT.ok;
    } finally {
      await close();
    }
  }
  // Ctrl-C: stop reading, close the producer (its private inbox topic / queue is removed, not
  // left behind) and say how far it got, instead of dying with the inbox still there.
  let interruptedBy: string | undefined;
  const onSignal = (signal: NodeJS.Signals): void => {
    interruptedBy = signal;
    void close();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // `publish --await | head -1`: the result lines (and invalid lines) go to stdout, and once its
  // reader has gone the rest would be read into nothing and the run exit 0 as if delivered.
  const offStdout = onStdoutClosed((code) => {
    interruptedBy ??= `stdout closing (${code})`;
    void close();
  });
  const stats = newBulkStats();
  const total = source?.total ?? requests.length;
  // Progress on stderr for a long run (results go to stdout or --out): each second on a terminal.
  const startedAt = Date.now();
  const showProgress = source?.progress === true || out !== undefined;
  const progress = showProgress
    ? setInterval(() => process.stderr.write(`${progressLine(stats, total, Date.now() - startedAt, values.await)}\n`), process.stderr.isTTY ? 1_000 : 10_000)
    : undefined;
  progress?.unref();
  // Until then nothing was read or sent: a RESULTS made by this run is removed, not left empty.
  let publishing = false;
  try {
    // A broker that does not answer: every line was read and handed to the producer, the progress
    // line said "1000 published", and the lines read meanwhile got no record. Opened first (as
    // load and frames do), a wrong broker stops the run before a line is read.
    if (values.await && !(await readyForReplies(producer, timeoutMs, () => interruptedBy !== undefined))) {
      process.stderr.write(`npu-fleet: interrupted by ${interruptedBy ?? 'a signal'} before publishing started: nothing was sent\n`);
      return EXIT.interrupted;
    }
    publishing = true;
    await bulkPublish({
      producer,
      entries: source?.entries ?? entriesOf(requests),
      awaitReplies: values.await,
      // A .json array's entries are items (the reader's own messages say so), not lines.
      unit: values.file !== undefined && !isJsonLines(values.file) ? 'item' : 'line',
      timeoutMs,
      inFlight,
      ...(source?.prepare === undefined ? {} : { prepare: source.prepare }),
      ...(source?.repeats === undefined ? {} : { repeats: source.repeats }),
      ...(out === undefined ? {} : { done: out.done }),
      // Only a --resume continues an earlier run: a fresh one scores its own lines, whatever ids
      // an earlier data set used (BullMQ would hand it that set's answers).
      fresh: resumeFrom === undefined,
      onRecord: (r, line) => (out === undefined ? printLine(resultLine(r)) : out.write(r, line)),
      stopped: () => interruptedBy !== undefined,
      // A data set with no worker serving it crawled through every line as TIMEOUT, one --timeout-ms after another.
      stopIfNoneAnswered: values.await && values.file !== undefined,
      stats,
    }).catch((err: unknown) => {
      const e = FleetError.from(err, 'INTERNAL');
      if (e.details?.['noneAnswered'] !== true) throw err;
      const models = fileModels.size > 0 ? [...fileModels] : (config.models ?? []);
      throw new FleetError(
        e.code,
        `${e.message}: is a worker serving ${models.length > 0 ? models.join(', ') : 'the models'} on this ${config.transport.kind} transport (same topics/queues prefix)? ` +
          (out === undefined ? 'Nothing more was sent' : `Each line read has its record in ${values.out}; once a worker serves them, rerun with --out ${values.out} --resume`),
        { cause: err, retriable: true, details: e.details },
      );
    });
    if (interruptedBy !== undefined && !values.await) {
      process.stderr.write(`npu-fleet: interrupted by ${interruptedBy} after publishing ${stats.published} of ${total} request(s)\n`);
      return EXIT.interrupted;
    }
    if (interruptedBy !== undefined) {
      const answered = answeredCount(stats);
      process.stderr.write(
        `npu-fleet: interrupted by ${interruptedBy} after ${answered} of ${stats.published} result(s); ` +
          'the others were published and may still be served, but their results will not be read here' +
          (out === undefined ? '' : `; rerun with --out ${values.out} --resume to send the rest`) +
          '\n',
      );
      return EXIT.interrupted;
    }
    if (showProgress) process.stderr.write(`${summaryLine(stats, values.out)}\n`);
    if (!values.await) {
      printLine(`published ${stats.published} request(s)`);
      // BullMQ dropped their adds without a word: "published" alone read as if they would run.
      // Said, but not an exit 4: publishing the same requests again after a failed publish (safe,
      // docs/producers.md) meets the jobs the failed one added, and a retry loop would never end.
      if (stats.dropped.count > 0) {
        process.stderr.write(
          `npu-fleet: ${stats.dropped.count} of the requests published were not added: BullMQ holds an earlier job of each id ` +
            `(answered within the last hour, or still queued), so they do not run again and their results went to that job's replyTo ` +
            `(ids ${stats.dropped.ids.map((id) => JSON.stringify(id)).join(', ')}${stats.dropped.count > stats.dropped.ids.length ? ', ...' : ''}): ` +
            `fine for the same requests published again; other requests need new ids to run (publish --await takes the earlier answers)\n`,
        );
      }
      if (stats.invalidEntries === 0) return EXIT.ok;
      process.stderr.write(`npu-fleet: ${stats.invalidEntries} request(s) refused before sending (invalid: see their records); exit ${EXIT.notAllAnswered}\n`);
      return EXIT.notAllAnswered;
    }
    if (out?.unreadable) process.stderr.write(`npu-fleet: ${out.unreadable} line(s) of ${values.out} were not results (cut off by a crash?) and were ignored\n`);
    const allOk = stats.answered.ok === stats.published && stats.invalidEntries === 0 && stats.unanswered === 0 && stats.idInUse === 0;
    if (allOk) return EXIT.ok;
    // Not 1: the run went through; 1 is for one stopped on an error (bulkPublish throws it).
    // Those answered: a request that timed out before the broker had it is in unanswered, not published.
    const notOk = answeredCount(stats) - stats.answered.ok;
    process.stderr.write(
      `npu-fleet: not every request was answered ok: ${notOk} answered other than ok, ${stats.invalidEntries} refused before sending (invalid), ` +
        `${stats.unanswered} without a reply within --timeout-ms` +
        (stats.idInUse > 0
          ? `, ${stats.idInUse} not run because BullMQ holds an earlier job of each id with other inputs, not yet answered (another data set reusing the ids?): run again with --resume once those are answered, or give these lines new ids`
          : '') +
        `; exit ${EXIT.notAllAnswered}\n`,
    );
    return EXIT.notAllAnswered;
  } catch (err) {
    if (!(err instanceof FleetError)) throw err;
    // Said here, before the close below: with the broker gone the close can be abandoned after
    // 5 s, and its note then came first, the reason the run stopped only after it.
    process.stderr.write(`npu-fleet: ${err.message}\n`);
    return exitCodeOf(err);
  } finally {
    clearInterval(progress);
    offStdout();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await closeWithin(close(), config.transport.kind);
    if (publishing) await out?.close();
    else await out?.discardIfUnused();
  }
}

/**
 * Opens the producer's reply inbox (connecting to the broker) before anything is read or sent,
 * bounded by --timeout-ms; false when stopped meanwhile. A failure names the transport's setting
 * (the producer's message): nothing was sent.
 */
async function readyForReplies(producer: Producer, timeoutMs: number, stopped: () => boolean): Promise<boolean> {
  const kind = producer.kind;
  const preparing = producer.prepare();
  preparing.catch(() => undefined);
  let bound: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      preparing,
      new Promise<never>((_, reject) => {
        bound = setTimeout(
          // Not the broker alone: a Kafka that answers takes 0.5-5 s to open an inbox (topic,
          // group join), so a tight per-request --timeout-ms ran out on healthy brokers.
          () =>
            reject(
              new FleetError(
                'TIMEOUT',
                `it did not finish within ${timeoutMs} ms (--timeout-ms); --timeout-ms also bounds opening the reply inbox ` +
                  `(${kind === 'kafka' ? 'on Kafka 0.5-5 s: creating its topic and joining its consumer group' : 'connecting to Redis and starting its reply worker'}): ` +
                  `raise it if the ${kind === 'kafka' ? 'brokers are' : 'Redis is'} up, else check ${kind === 'kafka' ? 'transport.kafka.brokers' : 'transport.bullmq.redisUrl'}`,
              ),
            ),
          timeoutMs,
        );
      }),
    ]);
    return true;
  } catch (err) {
    if (stopped()) return false;
    const e = FleetError.from(err, 'TRANSPORT_ERROR');
    throw new FleetError(e.code, `publishing stopped after 0 requests, before reading a line: the ${kind} producer could not open its reply inbox (nothing was sent): ${e.message}`, {
      cause: err,
      retriable: e.retriable,
      details: { ...e.details, transport: kind },
    });
  } finally {
    clearTimeout(bound);
  }
}

async function* syntheticEntries(model: ModelConfig, count: number, override: (r: RequestEnvelope) => void): AsyncGenerator<FileEntry> {
  const rand = prng(Date.now());
  const idPrefix = `cli-${process.pid}-${Date.now()}`;
  for (let i = 0; i < count; i++) {
    const request = syntheticRequest(model, i, rand, { idPrefix, deadlineShare: 0 });
    override(request);
    yield { line: i + 1, request };
  }
}

async function* entriesOf(requests: readonly RequestEnvelope[]): AsyncGenerator<FileEntry> {
  for (let i = 0; i < requests.length; i++) yield { line: i + 1, request: requests[i] as RequestEnvelope };
}

/**
 * --file is a file this process can open. A data set's first reader (the line count) failed
 * with node's bare "Error: ENOENT: ..." and exit 1, not naming the flag.
 */
function checkReadable(path: string): void {
  try {
    const fd = openSync(path, 'r');
    try {
      if (fstatSync(fd).isDirectory()) throw Object.assign(new Error('a directory'), { code: 'EISDIR' });
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new FleetError('INVALID_ARGUMENT', `--file ${path} cannot be read (${why})`, { cause: err, details: { field: 'file' } });
  }
}

/** Bytes of a file, or undefined when it cannot be read (its reader words that error). */
function sizeOf(path: string): number | undefined {
  try {
    return statSync(path).size;
  } catch {
    return undefined;
  }
}

/** Both paths name one existing file (a link or another spelling included). */
function sameFile(a: string, b: string): boolean {
  try {
    const [x, y] = [statSync(a), statSync(b)];
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false; // one is missing: --out is created, --file is worded by its reader
  }
}

/** A JSON Lines file, or a JSON file holding an array: many requests, not one. */
function isManyRequestsFile(path: string): boolean {
  if (isJsonLines(path)) return true;
  try {
    return readFileSync(path, 'utf8').trimStart().startsWith('[');
  } catch {
    return false; // the one-request path words the error
  }
}

function resultLine(r: ResultEnvelope): string {
  return JSON.stringify({
    id: r.id,
    status: r.status,
    version: r.version,
    late: r.late,
    timings: r.timings,
    batchSize: r.batchSize,
    gear: r.gear,
    device: r.device,
    error: r.error,
    outputs: r.outputs?.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape })),
  });
}

/** The one request of a JSON file; any problem with it is an error naming the file (nothing is sent). */
async function requestFromFile(path: string, limits: CodecLimits): Promise<RequestEnvelope> {
  for await (const entry of readRequestFile(path, limits)) {
    if ('request' in entry) return entry.request;
    const err = entry.error;
    throw new FleetError('INVALID_ARGUMENT', `--file ${path}: ${err.message}`, { cause: err, details: err.details });
  }
  throw new FleetError('INVALID_ARGUMENT', `--file ${path} holds no request`);
}

function findModel(repository: string, name: string): ModelConfig | undefined {
  return scanRepository(repository, { artifact: 'onnx', only: [name] }).models.get(name)?.config;
}

type PriorityConfig = Pick<ModelConfig, 'priorityLevels' | 'defaultPriority'>;

/**
 * When the model's config is at hand (the repository may not exist where publish runs): a request
 * without a priority gets the model's defaultPriority, the one a worker serves it at, for without
 * one it would be routed as priority 0 (fetched ahead of all other work: the Kafka p0 topic, BullMQ
 * priority 1); and on Kafka a priority past the model's levels lands on a topic no worker reads, so
 * it is refused.
 */
function settlePriorities(requests: Array<Pick<RequestEnvelope, 'model' | 'priority'>>, repository: string, levels: Map<string, PriorityConfig | undefined>): void {
  for (const r of requests) {
    if (!levels.has(r.model)) {
      let found: PriorityConfig | undefined;
      try {
        found = findModel(repository, r.model);
      } catch {
        found = undefined;
      }
      levels.set(r.model, found);
    }
    const m = levels.get(r.model);
    if (m === undefined) continue;
    r.priority ??= m.defaultPriority;
    refusePriorityPastLevels(r.model, m.priorityLevels, r.priority);
  }
}
