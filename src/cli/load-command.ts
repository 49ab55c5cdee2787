import { loadFleetConfig } from '../contracts/config-loader.ts';
import type { FleetConfig } from '../contracts/fleet-config.ts';
import type { ModelConfig } from '../contracts/model-config.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { createProducer, type Producer } from '../producer/index.ts';
import { runOpenLoop } from '../producer/open-loop.ts';
import { RunStats } from '../producer/run-stats.ts';
import { prng, syntheticInputs, syntheticRequest } from '../runtime/demo-load.ts';
import { scanRepository } from '../runtime/model-repository.ts';
import { closeWithin } from './bounded-close.ts';
import { FrameOrder } from './frame-order.ts';
import { clientLogger } from './client-logger.ts';
import { EXIT } from './exit-codes.ts';
import { intOption, msOption, noPositionals, parseCommandArgs, wholeMsOption } from './cli-args.ts';
import { onStdoutClosed, printLine } from './stdout-lines.ts';
import { refusePriorityPastLevels } from './priority-levels.ts';

const COMMON = {
  config: { type: 'string' },
  model: { type: 'string' },
  seconds: { type: 'string' },
  priority: { type: 'string' },
  'timeout-ms': { type: 'string', default: '30000' },
  'max-outstanding': { type: 'string', default: '20000' },
  'drain-ms': { type: 'string', default: '5000' },
} as const;

/**
 * `npu-fleet load`: an open-loop synthetic load at a fixed rate, for capacity tests and autoscaling
 * drills: requests fitting the model(s), mixed priorities (or one), a share with deadlines. One
 * line a second (sent, answered, ok latency, batch fill, outcomes), a summary at the end.
 */
export async function loadCommand(args: readonly string[]): Promise<number> {
  const parsed = parseCommandArgs('load', args, {
    ...COMMON,
    rate: { type: 'string', default: '100' },
    'deadline-ms': { type: 'string', default: '50-500' },
    'deadline-share': { type: 'string', default: '0.5' },
    'max-samples': { type: 'string', default: '4' },
  });
  if (parsed === undefined) return 0;
  const { values, positionals } = parsed;
  noPositionals('load', positionals);
  const rate = intOption('rate', values.rate, 1, 1_000_000);
  const deadlineMs = rangeOption('deadline-ms', values['deadline-ms']);
  const deadlineShare = shareOption('deadline-share', values['deadline-share']);
  const maxSamples = intOption('max-samples', values['max-samples'], 1, 65_536);
  const run = commonOptions(values);
  const models = run.models;
  const rand = prng(Date.now());
  const idPrefix = `load-${process.pid}-${Date.now()}`;
  return drive(run, rate, `load: ${rate} req/s of ${models.map((m) => m.name).join(', ')}`, 'request', (seq) => {
    const model = models[seq % models.length] as ModelConfig;
    const r = syntheticRequest(model, seq, rand, { idPrefix, deadlineShare, deadlineMs, maxSamples });
    if (run.priority !== undefined) r.priority = run.priority;
    return r;
  });
}

/**
 * `npu-fleet frames`: a video pipeline's traffic. Each of `--streams` cameras sends one frame
 * (a one-sample request) every 1/fps s with `streamKey` = the camera and a deadline a few frame
 * intervals out; a model with `streams: { superseded: drop }` answers the frames a newer one
 * displaced as superseded. Same progress lines and summary as `load`.
 */
export async function framesCommand(args: readonly string[]): Promise<number> {
  const parsed = parseCommandArgs('frames', args, {
    ...COMMON,
    streams: { type: 'string', default: '4' },
    fps: { type: 'string', default: '25' },
    'deadline-ms': { type: 'string' },
  });
  if (parsed === undefined) return 0;
  const { values, positionals } = parsed;
  noPositionals('frames', positionals);
  const streams = intOption('streams', values.streams, 1, 100_000);
  const fps = fpsOption(values.fps);
  // A frame is worth little once the next two have been taken.
  const deadlineMs = values['deadline-ms'] === undefined ? Math.ceil(2_000 / fps) : wholeMsOption('deadline-ms', values['deadline-ms']);
  const run = commonOptions(values);
  if (run.models.length !== 1) throw new FleetError('INVALID_ARGUMENT', '--model names one model for frames', { details: { field: 'model' } });
  const model = run.models[0] as ModelConfig;
  const rand = prng(Date.now());
  const idPrefix = `frames-${process.pid}-${Date.now()}`;
  // Strictly increasing per camera: the fleet tells newer frames by createdAt.
  const lastCreatedAt = new Float64Array(streams);
  return drive(run, streams * fps, `frames: ${streams} stream(s) x ${fps} fps of ${model.name}, deadline ${deadlineMs} ms`, 'frame', (seq) => {
    const stream = seq % streams;
    const frame = Math.floor(seq / streams);
    const createdAt = Math.max(Date.now(), (lastCreatedAt[stream] ?? 0) + 1);
    lastCreatedAt[stream] = createdAt;
    const r: RequestEnvelope = {
      id: `${idPrefix}-cam${stream}-${frame}`,
      model: model.name,
      streamKey: `${idPrefix}-cam${stream}`,
      createdAt,
      deadlineAt: createdAt + deadlineMs,
      inputs: syntheticInputs(model, 1, rand),
      // The model's default, the one a worker serves it at: without one it would be routed as
      // priority 0, fetched ahead of all other work.
      priority: run.priority ?? model.defaultPriority,
    };
    return r;
  }, new FrameOrder());
}

interface RunOptions {
  readonly config: FleetConfig;
  readonly models: readonly ModelConfig[];
  readonly durationMs: number | undefined;
  readonly priority: number | undefined;
  readonly timeoutMs: number;
  readonly maxOutstanding: number;
  readonly drainMs: number;
}

function commonOptions(values: { config?: string; model?: string; seconds?: string; priority?: string; 'timeout-ms': string; 'max-outstanding': string; 'drain-ms': string }): RunOptions {
  const durationMs = values.seconds === undefined ? undefined : secondsOption(values.seconds) * 1000;
  const priority = values.priority === undefined ? undefined : intOption('priority', values.priority, 0);
  const timeoutMs = msOption('timeout-ms', values['timeout-ms']);
  const maxOutstanding = intOption('max-outstanding', values['max-outstanding'], 1, 10_000_000);
  const drainMs = intOption('drain-ms', values['drain-ms'], 0, 3_600_000);
  const names = (values.model ?? '').split(',').map((n) => n.trim()).filter((n) => n !== '');
  if (names.length === 0) throw new FleetError('INVALID_ARGUMENT', '--model NAME is required (several: --model a,b)', { details: { field: 'model' } });
  const config = loadFleetConfig({ file: values.config });
  if (config.transport.kind === 'memory') {
    throw new FleetError('INVALID_ARGUMENT', 'load and frames need a Kafka or BullMQ transport in --config (the memory broker lives inside `npu-fleet start`)');
  }
  const found = scanRepository(config.modelRepository, { artifact: 'onnx', only: names }).models;
  const models = names.map((name) => {
    const m = found.get(name)?.config;
    if (m === undefined) throw new FleetError('UNKNOWN_MODEL', `model ${name} is not in ${config.modelRepository}`, { details: { field: 'model' } });
    if (priority !== undefined) refusePriorityPastLevels(name, m.priorityLevels, priority);
    return m;
  });
  return { config, models, durationMs, priority, timeoutMs, maxOutstanding, drainMs };
}

/** Runs the open loop with progress lines each second and a summary; Ctrl-C ends it like --seconds. */
async function drive(
  run: RunOptions,
  rate: number,
  title: string,
  noun: 'request' | 'frame',
  next: (seq: number) => RequestEnvelope,
  order?: FrameOrder,
): Promise<number> {
  const producer = createProducer(run.config.transport, { limits: run.config.limits, log: clientLogger(run.config) });
  const stats = new RunStats();
  /** The first answer that was an error (not ok, late, expired or superseded), for the exit-1 line. */
  let firstError: { outcome: string; text: string } | undefined;
  /** Requests that failed without a reply (a publish refused, Redis or Kafka not answering), and the first such error: the counts give only its code. */
  let failedSends = 0;
  let firstFailedSend: FleetError | undefined;
  let stopBy: NodeJS.Signals | undefined;
  let onStop: () => void = () => undefined;
  /** Resolves at the first stop (a signal, stdout closed): ends the wait for the producer to be ready. */
  const stopped = new Promise<void>((resolve) => (onStop = resolve));
  /** Set while the producer closes: a signal then gives up on the close. */
  let abandonClose: ((signal: NodeJS.Signals) => void) | undefined;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (abandonClose !== undefined) return abandonClose(signal);
    // A second one: stop waiting for the replies still out.
    if (stopBy !== undefined) void producer.close();
    stopBy = signal;
    onStop();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // `load | head -2`: the lines are the point of the run, so it stops as on Ctrl-C (replies still
  // out are waited for) rather than sending on, unwatched, to the end of --seconds.
  const offStdout = onStdoutClosed((code) => {
    if (stopBy !== undefined) return;
    printLine(`npu-fleet: stdout closed (${code}): stopping the load as on Ctrl-C; the replies still out are waited for up to --drain-ms`, process.stderr);
    stopBy = 'SIGPIPE';
    onStop();
  });
  printLine(`${title}${run.durationMs === undefined ? ', until Ctrl-C' : ` for ${run.durationMs / 1000} s`} (${run.config.transport.kind})`);
  let sentBefore = 0;
  let sentNow = 0;
  let last = Date.now();
  let progress: NodeJS.Timeout | undefined;
  try {
    await readyForReplies(producer, noun === 'request' ? 'load' : 'frames', run, stopped);
    last = Date.now();
    progress = setInterval(() => {
      const now = Date.now();
      printLine(stats.line(now - last, sentNow - sentBefore) + (order?.line() ?? ''));
      sentBefore = sentNow;
      last = now;
    }, 1_000);
    const outcome = await runOpenLoop({
      producer: {
        requestMany: (requests, options) => {
          sentNow += requests.length;
          return producer.requestMany(requests, options);
        },
      },
      next,
      ratePerSecond: rate,
      durationMs: run.durationMs,
      timeoutMs: run.timeoutMs,
      maxOutstanding: run.maxOutstanding,
      drainMs: run.drainMs,
      onResult: (r, request) => {
        const outcome = stats.result(r);
        if (firstError === undefined && !NOT_ERRORS.has(outcome)) firstError = { outcome, text: `${r.error?.code ?? 'no code'}: ${r.error?.message ?? 'no message'}` };
        order?.result(r, request);
      },
      // CLOSED too: after a second Ctrl-C the summary counts the requests it stopped waiting for.
      onError: (e) => {
        if (stats.noReply(e) === 'no reply') return;
        failedSends++;
        firstFailedSend ??= e;
      },
      onHeldBack: (n) => stats.heldBack(n),
      stopped: () => stopBy !== undefined,
    });
    clearInterval(progress);
    // The part-second since the last line, so that the lines add up to the summary.
    if (sentNow > sentBefore || stats.intervalHasOutcomes()) printLine(stats.line(Math.max(1, Date.now() - last), sentNow - sentBefore) + (order?.line() ?? ''));
    printLine(
      `${stopBy === undefined ? 'done' : `stopped by ${stopBy}`}: sent ${outcome.sent}` +
        `${outcome.heldBack > 0 ? `, held back ${outcome.heldBack} (over --max-outstanding: the fleet did not keep up)` : ''}` +
        `${outcome.outstanding > 0 ? `, ${outcome.outstanding} without a reply after --drain-ms` : ''} | ${stats.summary()}${order?.summary() ?? ''}`,
    );
    if (firstFailedSend !== undefined) {
      printLine(`npu-fleet: ${failedSends} request(s) failed without a reply; the first: ${firstFailedSend.code}: ${firstFailedSend.message}`, process.stderr);
    }
    // A drill or a CI job reading the exit code must not pass on a fleet that answered nothing.
    const answered = stats.replies();
    if (outcome.sent > 0 && answered === 0) {
      printLine(
        `npu-fleet: no request was answered: is a worker serving ${run.models.map((m) => m.name).join(', ')} on this ${run.config.transport.kind} transport (same topics/queues prefix)?; exit ${EXIT.failed}`,
        process.stderr,
      );
      return EXIT.failed;
    }
    // Answered, but nothing served in time (all expired, late, superseded or errors): a drill that
    // served nothing has failed as surely as one nobody answered.
    if (outcome.sent > 0 && (stats.total.get('ok') ?? 0) === 0) {
      printLine(`npu-fleet: ${nothingServedLine(noun, stats.total, firstError)}; exit ${EXIT.failed}`, process.stderr);
      return EXIT.failed;
    }
    // Requests still out after --drain-ms are in no count yet (close() fails them after this).
    const unanswered = outcome.sent - answered;
    if (unanswered > 0) {
      printLine(
        `npu-fleet: ${unanswered} of ${outcome.sent} request(s) got no answer (no reply within --timeout-ms, still out after --drain-ms, or the publish failed); exit ${EXIT.notAllAnswered}`,
        process.stderr,
      );
      return EXIT.notAllAnswered;
    }
    return EXIT.ok;
  } finally {
    clearInterval(progress);
    offStdout();
    try {
      // The listener stays on during the close: with it off a SIGTERM killed the process by the
      // signal, and the exit code (1: nothing answered) was lost.
      await closeWithin(producer.close(), run.config.transport.kind, (abandon) => (abandonClose = abandon));
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
  }
}

/** How long the producer may take to get ready before stderr says what the run is waiting for. */
const READY_NOTICE_MS = 500;

/**
 * Opens the producer's reply inbox before the run clock starts: on Kafka that takes 0.5-4.6 s
 * (creating the inbox topic, joining its consumer group), and the requests of the first seconds
 * used to wait on it with their deadlines running, counted late or expired. Bounded by
 * --timeout-ms, the longest a request would have waited for the inbox; resolves at once on a stop
 * (the loop then sends nothing). A failure names the transport: no request was sent.
 */
async function readyForReplies(producer: Producer, command: string, run: RunOptions, stopped: Promise<void>): Promise<void> {
  const kind = producer.kind;
  const startedAt = Date.now();
  let noticed = false;
  const notice = setTimeout(() => {
    noticed = true;
    printLine(`${command}: opening the reply inbox on ${kind} (${INBOX_STEPS[kind]}) before the run starts...`, process.stderr);
  }, READY_NOTICE_MS);
  let bound: NodeJS.Timeout | undefined;
  const preparing = producer.prepare();
  // The bound or a stop may settle the race first; close() then ends the opening.
  preparing.catch(() => undefined);
  try {
    const how = await Promise.race([
      preparing.then(() => 'ready' as const),
      stopped.then(() => 'stopped' as const),
      new Promise<never>((_, reject) => {
        bound = setTimeout(
          () =>
            reject(
              new FleetError('TIMEOUT', `it did not finish within ${run.timeoutMs} ms (--timeout-ms); ${WHERE[kind]}`, {
                details: { transport: kind, timeoutMs: run.timeoutMs },
              }),
            ),
          run.timeoutMs,
        );
      }),
    ]);
    if (noticed && how === 'ready') printLine(`${command}: the reply inbox is open after ${((Date.now() - startedAt) / 1000).toFixed(1)} s; the run starts now`, process.stderr);
  } catch (err) {
    const e = FleetError.from(err, 'TRANSPORT_ERROR');
    throw new FleetError(e.code, `${command}: the ${kind} producer could not open its reply inbox, so no request was sent: ${e.message}`, {
      cause: err,
      retriable: e.retriable,
      details: { ...e.details, transport: kind },
    });
  } finally {
    clearTimeout(notice);
    clearTimeout(bound);
  }
}

const INBOX_STEPS: Record<Producer['kind'], string> = {
  kafka: 'connecting, creating its topic, joining its consumer group',
  bullmq: 'connecting to Redis, starting its reply worker',
  memory: 'its consumer',
};

/**
 * Not the broker alone: a Kafka that answers takes 0.5-5 s to open an inbox (topic, group join),
 * so a tight --timeout-ms (a frame's wait for its result) ran out on healthy brokers.
 */
const WHERE: Record<Producer['kind'], string> = {
  kafka: `--timeout-ms also bounds opening the reply inbox (${INBOX_STEPS.kafka}): raise it if the brokers are up, else check transport.kafka.brokers`,
  bullmq: `--timeout-ms also bounds opening the reply inbox (${INBOX_STEPS.bullmq}): raise it if the Redis is up, else check transport.bullmq.redisUrl`,
  memory: 'the memory broker did not answer',
};

/** Outcomes that are no error of the fleet's: what a deadline or a newer frame decided. */
const NOT_ERRORS = new Set(['ok', 'late', 'expired', 'superseded']);

/** Why a run that got answers served none in time, and what to do about it. */
function nothingServedLine(noun: 'request' | 'frame', total: ReadonlyMap<string, number>, firstError: { outcome: string; text: string } | undefined): string {
  const counts = [...total].sort((a, b) => b[1] - a[1]).map(([outcome, n]) => `${n} ${outcome}${outcome === firstError?.outcome ? ` (first: ${firstError.text})` : ''}`);
  const missedDeadline = (total.get('expired') ?? 0) + (total.get('late') ?? 0) > 0;
  return (
    `no ${noun} was served in time: ${counts.join(', ')}` +
    (missedDeadline ? '; raise --deadline-ms above the device time' : '')
  );
}

/** `MS` or `LO-HI` (whole ms: deadlines are whole epoch ms, a fraction would make requests invalid). */
function rangeOption(flag: string, value: string): [number, number] {
  const m = /^(\d+)(?:-(\d+))?$/.exec(value.trim());
  const lo = Number(m?.[1]);
  const hi = m?.[2] === undefined ? lo : Number(m[2]);
  if (m === null || !(lo > 0) || hi < lo) {
    throw new FleetError('INVALID_ARGUMENT', `--${flag} must be MS or LO-HI whole milliseconds (e.g. 50-500), got "${value}"`, { details: { field: flag } });
  }
  return [lo, hi];
}

function shareOption(flag: string, value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1) {
    throw new FleetError('INVALID_ARGUMENT', `--${flag} must be a number from 0 to 1, got "${value}"`, { details: { field: flag } });
  }
  return n;
}

/** Frames per second of each camera: cameras run at fractional rates too (NTSC 29.97, 59.94, 23.976). */
function fpsOption(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0 || n > 1_000) {
    throw new FleetError('INVALID_ARGUMENT', `--fps must be a number of frames per second above 0 and at most 1000 (e.g. 25 or 29.97), got "${value}"`, {
      details: { field: 'fps' },
    });
  }
  return n;
}

function secondsOption(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0) {
    throw new FleetError('INVALID_ARGUMENT', `--seconds must be a positive number of seconds, got "${value}"`, { details: { field: 'seconds' } });
  }
  return n;
}
