import { loadFleetConfig } from '../contracts/config-loader.ts';
import { MAX_PRIORITY_LEVELS, MODEL_NAME_PATTERN } from '../contracts/request-envelope.ts';
import { ERROR_CODES, FleetError } from '../errors/fleet-error.ts';
import { withoutJsonQuote } from '../errors/json-syntax.ts';
import { createLogger } from '../observability/logger.ts';
import { openDeadLetters, type DeadLetter, type DeadLetterQuery, type DeadLetters } from '../transport/index.ts';
import { REPLAY_CLAIM_TTL_MS } from '../transport/bullmq/bullmq-dead-letters.ts';
import { renderName } from '../transport/names.ts';
import { intOption, parseCommandArgs } from './cli-args.ts';
import { servedModelProblem } from './served-models.ts';
import { EXIT } from './exit-codes.ts';
import { checkPriorityLevels } from './priority-levels.ts';

const DURATION = /^(\d+)(ms|s|m|h|d)$/;
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const REASON = /^[A-Z][A-Z0-9_]*$/;
/** Skipped, passed-over and refreshed records printed one per line each; the rest are counted. */
const SHOWN_SKIPS = 20;
/** `--refresh-deadline`: a duration ahead of each re-send (no ISO time: the point is a fresh one). */
const AHEAD = /^(\d+)(ms|s|m|h|d)$/;

/**
 * Exit codes of `dlq replay` (and `dlq purge`), in the usage text: a cron job needs to tell a DLQ
 * with nothing left to do from one that holds records a person must look at.
 */
export const DLQ_EXIT = {
  /** Every matching record was re-sent or passed over (re-sent before), or none matched. */
  done: EXIT.ok,
  /** Records were skipped for a cause to fix (or the command failed: a FleetError, the message on stderr). */
  skipped: EXIT.failed,
  /** Only records whose deadline had passed were skipped: nothing else is left (--refresh-deadline or purge --expired). */
  onlyExpired: EXIT.onlyExpired,
} as const;

/** `--refresh-deadline`: a duration (30s, 5m, 2h) each re-sent request gets to be answered in; ms. */
export function parseRefreshDeadline(value: string): number {
  const d = AHEAD.exec(value.trim());
  const ms = d === null ? NaN : Number(d[1]) * UNIT_MS[d[2] as keyof typeof UNIT_MS];
  if (!Number.isSafeInteger(ms) || ms <= 0) {
    throw new FleetError('INVALID_ARGUMENT', `--refresh-deadline must be a duration ahead of the re-send (30s, 5m, 2h), got "${value}"`, {
      details: { field: 'refresh-deadline' },
    });
  }
  return ms;
}

/** The exit code for a replay's skips: only expired ones are no failure of the replay (DLQ_EXIT). */
export function replayExitCode(skipped: ReadonlyArray<{ readonly expired?: true }>): number {
  if (skipped.length === 0) return DLQ_EXIT.done;
  return skipped.every((s) => s.expired === true) ? DLQ_EXIT.onlyExpired : DLQ_EXIT.skipped;
}

/** One line per record (up to SHOWN_SKIPS), then a count of the rest. */
function perRecord(out: (line: string) => void, what: string, records: ReadonlyArray<{ readonly ref: string; readonly why: string }>): void {
  for (const r of records.slice(0, SHOWN_SKIPS)) out(`  ${what} ${r.ref}: ${r.why}`);
  if (records.length > SHOWN_SKIPS) out(`  ... and ${records.length - SHOWN_SKIPS} more ${what}`);
}

const ISO_DATE = /^\d{4}-\d{2}-\d{2}/;
/** A time of day followed by Z or a UTC offset (+02:00, -0130, +02). */
const TIME_WITH_ZONE = /[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)$/i;

/**
 * `--since`: a duration back from now (30m, 2h, 7d) or an ISO-8601 time with Z or an offset; epoch
 * ms. A time without a zone is refused: Date.parse reads it in the local zone of the host that runs
 * the command (a date alone, as UTC), so one --since named a different instant for each operator
 * or cron host.
 */
export function parseSince(value: string, nowMs: number): number {
  const text = value.trim();
  const d = DURATION.exec(text);
  if (d !== null) return nowMs - Number(d[1]) * UNIT_MS[d[2] as keyof typeof UNIT_MS];
  if (ISO_DATE.test(text) && !TIME_WITH_ZONE.test(text)) {
    const fixed = /[T ]\d{2}:\d{2}/i.test(text) ? `${text}Z` : `${text.slice(0, 10)}T00:00:00Z`;
    throw new FleetError('INVALID_ARGUMENT', `--since ${text} has no time zone, so each host would read it in its own: add Z or an offset, e.g. ${fixed}`, {
      details: { field: 'since' },
    });
  }
  const at = ISO_DATE.test(text) ? Date.parse(text) : NaN;
  if (!Number.isFinite(at)) {
    throw new FleetError('INVALID_ARGUMENT', `--since must be a duration back from now (30m, 2h, 7d) or an ISO time (2026-11-30T08:00:00Z), got "${value}"`, {
      details: { field: 'since' },
    });
  }
  return at;
}

/** `--reason`: comma-separated reason codes (as in `npu-fleet dlq list`), e.g. DEVICE_HANG,UNKNOWN_MODEL. */
export function parseReasons(value: string): string[] {
  const reasons = value.split(',').map((r) => r.trim()).filter((r) => r !== '');
  const bad = reasons.find((r) => !REASON.test(r));
  if (reasons.length === 0 || bad !== undefined) {
    throw new FleetError('INVALID_ARGUMENT', `--reason takes reason codes like DEVICE_HANG,UNKNOWN_MODEL (upper case, comma-separated), got "${value}"`, {
      details: { field: 'reason' },
    });
  }
  // Every dead letter's reason is a FleetError code: a misspelt one would match nothing, and a
  // scheduled replay would exit 0 with the records it was meant for still in the DLQ.
  const unknown = reasons.find((r) => !Object.hasOwn(ERROR_CODES, r));
  if (unknown !== undefined) {
    throw new FleetError('INVALID_ARGUMENT', `--reason ${unknown} is not a reason code; the codes are ${Object.keys(ERROR_CODES).join(', ')} (npu-fleet dlq list shows those of a model)`, {
      details: { field: 'reason' },
    });
  }
  return reasons;
}

/** A record dead-lettered before 75d316a may hold V8's quote of its payload in its message: shown without it. */
function describeLetter(l: DeadLetter): string {
  const at = Number.isFinite(l.deadAt) ? new Date(l.deadAt).toISOString() : '(time unknown)';
  const id = l.requestId === undefined ? 'no id' : `id ${l.requestId}`;
  const from = l.source === undefined ? 'source unknown' : `from ${l.source}${l.priority === undefined ? '' : ` p${l.priority}`}`;
  const replayed =
    l.purgedAt !== undefined ? ` (purged ${new Date(l.purgedAt).toISOString()})` : l.replayedAt === undefined ? '' : ` (replayed ${new Date(l.replayedAt).toISOString()})`;
  return `  ${at}  ${l.reason.padEnd(16)} ${id}, ${from}, ${l.bytes} B: ${withoutJsonQuote(l.message).slice(0, 160)}  [${l.ref}]${replayed}`;
}

/** `npu-fleet dlq purge --expired`: discards the matching records whose deadline passed (DeadLetters.purge). */
async function purgeCommand(
  dl: DeadLetters,
  query: DeadLetterQuery,
  dryRun: boolean,
  json: boolean,
  kind: 'kafka' | 'bullmq',
  out: (line: string) => void,
  sayIfNotServed: (scanned: number) => void,
): Promise<number> {
  if (dl.purge === undefined) throw new FleetError('INVALID_ARGUMENT', 'dlq purge needs a Kafka or BullMQ transport');
  const report = await dl.purge({
    ...query,
    expired: true,
    dryRun,
    onProgress: ({ scanned, replayed }) => process.stderr.write(`dlq purge: ${scanned} read, ${replayed} ${dryRun ? 'would be ' : ''}discarded\n`),
    onWarning: (message) => process.stderr.write(`dlq purge: warning: ${message}\n`),
  });
  const code = report.skipped.length === 0 ? DLQ_EXIT.done : DLQ_EXIT.skipped;
  if (json) {
    out(JSON.stringify(report));
    sayIfNotServed(report.scanned);
    return code;
  }
  out(`${dryRun ? 'would discard' : 'discarded'} ${report.purged.length} of ${report.matched} matching dead letter(s) (${report.scanned} read) whose deadline passed; kept ${report.kept} (no deadline, or not passed yet)`);
  sayIfNotServed(report.scanned);
  if (report.alreadyDone !== undefined && report.alreadyDone > 0) {
    out(`  passed over ${report.alreadyDone} replayed or purged before (the DLQ topic keeps them; dlq list shows when)`);
  }
  // Kafka's log keeps what is purged: say how replays know.
  if (kind === 'kafka' && report.purged.length > 0 && !dryRun) out('  the DLQ topic keeps them: a purge marker in its .replayed topic makes replays pass them over');
  perRecord(out, dryRun ? 'would discard' : 'discarded', report.purged);
  perRecord(out, 'skipped', report.skipped);
  return code;
}

/**
 * `npu-fleet dlq list|replay|purge`: what sits in a model's dead-letter topic/queue, by reason,
 * re-sending it to the request topic/queue it came from once its cause is fixed (a model
 * deployed, a limit raised, a device fixed), and discarding what expired. Exit codes: DLQ_EXIT.
 */
export async function dlqCommand(args: readonly string[], out: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): Promise<number> {
  const parsed = parseCommandArgs('dlq', args, {
    config: { type: 'string' },
    model: { type: 'string' },
    reason: { type: 'string' },
    since: { type: 'string' },
    limit: { type: 'string' },
    priority: { type: 'string' },
    'refresh-deadline': { type: 'string' },
    expired: { type: 'boolean', default: false },
    'dry-run': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  });
  if (parsed === undefined) return 0;
  const { values, positionals } = parsed;
  const [sub, extra] = positionals;
  if ((sub !== 'list' && sub !== 'replay' && sub !== 'purge') || extra !== undefined) {
    throw new FleetError('INVALID_ARGUMENT', 'usage: npu-fleet dlq list|replay|purge --model NAME [options] (run npu-fleet dlq --help)');
  }
  if (!values.model) throw new FleetError('INVALID_ARGUMENT', '--model NAME is required (each model has its own DLQ)', { details: { field: 'model' } });
  if (!MODEL_NAME_PATTERN.test(values.model)) {
    throw new FleetError('INVALID_ARGUMENT', `--model must be a model name (${MODEL_NAME_PATTERN.source}), got "${values.model.slice(0, 80)}"`, { details: { field: 'model' } });
  }
  if (sub === 'list' && (values['dry-run'] || values.priority !== undefined || values['refresh-deadline'] !== undefined)) {
    throw new FleetError('INVALID_ARGUMENT', '--dry-run, --priority and --refresh-deadline belong to `dlq replay`; `dlq list` changes nothing');
  }
  if (sub !== 'purge' && values.expired) throw new FleetError('INVALID_ARGUMENT', '--expired belongs to `dlq purge` (replay skips expired records; --refresh-deadline re-sends them)', { details: { field: 'expired' } });
  if (sub === 'purge' && !values.expired) {
    throw new FleetError('INVALID_ARGUMENT', 'dlq purge discards only records whose deadline passed: give --expired (records that can still be replayed are never purged)', { details: { field: 'expired' } });
  }
  if (sub === 'purge' && (values.priority !== undefined || values['refresh-deadline'] !== undefined)) {
    throw new FleetError('INVALID_ARGUMENT', '--priority and --refresh-deadline belong to `dlq replay`; `dlq purge` re-sends nothing');
  }
  const refreshDeadlineMs = values['refresh-deadline'] === undefined ? undefined : parseRefreshDeadline(values['refresh-deadline']);
  const query: DeadLetterQuery = {
    model: values.model,
    ...(values.reason === undefined ? {} : { reasons: parseReasons(values.reason) }),
    ...(values.since === undefined ? {} : { sinceAt: parseSince(values.since, Date.now()) }),
    ...(values.limit === undefined ? {} : { limit: intOption('limit', values.limit, 1) }),
  };
  const priority = values.priority === undefined ? undefined : intOption('priority', values.priority, 0, MAX_PRIORITY_LEVELS - 1);
  const config = loadFleetConfig({ file: values.config });
  if (config.transport.kind === 'memory') {
    throw new FleetError('INVALID_ARGUMENT', 'dlq needs a Kafka or BullMQ transport in --config (the memory broker lives inside `npu-fleet start`)');
  }
  // Else silently ignored: a Kafka record goes back to the topic it came from, which is its priority.
  if (config.transport.kind === 'kafka' && priority !== undefined) {
    throw new FleetError('INVALID_ARGUMENT', '--priority is for BullMQ records that recorded none; on Kafka a record is re-sent to its source topic, which is its priority (drop --priority)', {
      details: { field: 'priority' },
    });
  }
  // Given to the records that recorded none: past the model's levels they would wait at a
  // priority its workers do not serve (9 on a 3-level model went through); refused as publish does.
  if (priority !== undefined) checkPriorityLevels(config.modelRepository, query.model, priority);
  const notServed = servedModelProblem(config.modelRepository, config.models)(query.model);
  // Not refused: a retired model keeps its dead letters. But a misspelt name read "0 record(s)",
  // exit 0, the same as a clean DLQ: said when nothing was found (on stderr under --json).
  const sayIfNotServed = (scanned: number, matched = 0): void => {
    if (notServed === undefined) return;
    // A dry run of a replay the real run refuses (below) must not read as if it would go through.
    const refused = sub === 'replay' && values['dry-run'] && matched > 0;
    if (scanned > 0 && !refused) return;
    const line = refused
      ? `  model "${query.model}" is not served by this fleet (${notServed}): a real replay refuses these (exit 2) until it is deployed`
      : `  model "${query.model}" is not served by this fleet (${notServed}): is the name right? (a retired model keeps its dead letters; none here)`;
    if (values.json) process.stderr.write(`npu-fleet dlq:${line}\n`);
    else out(line);
  };
  const where =
    config.transport.kind === 'kafka'
      ? `kafka topic ${renderName(config.transport.kafka.dlqTemplate, query.model)}`
      : `bullmq queue ${renderName(config.transport.bullmq.dlqTemplate, query.model)}`;
  // Stop signals during a replay (installed below): the first stops it cleanly, a second exits at once.
  const stop = new AbortController();
  let stoppedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stoppedBy !== undefined) {
      process.stderr.write(
        `npu-fleet: ${signal} again: dlq replay exits at once, without counting what it re-sent (dlq list shows what is left); running it again is safe` +
          `${config.transport.kind === 'bullmq' ? `, though a record it was re-sending right now stays claimed and is skipped for up to ${REPLAY_CLAIM_TTL_MS / 1000} s` : ''}\n`,
      );
      process.exit(EXIT.interrupted);
    }
    stoppedBy = signal;
    process.stderr.write(`npu-fleet: ${signal}: stopping dlq replay after the ${config.transport.kind === 'kafka' ? 'transaction' : 'record'} in hand (${signal} again exits at once)\n`);
    stop.abort();
  };
  // Client logs to stderr: stdout carries the answer (--json is read by scripts).
  const dl: DeadLetters = openDeadLetters(config.transport, { log: createLogger({ level: 'error', destination: process.stderr }) });
  try {
    if (sub === 'list') {
      const listing = await dl.list(query);
      if (values.json) {
        out(JSON.stringify({ ...listing, letters: listing.letters.map((l) => ({ ...l, message: withoutJsonQuote(l.message) })) }));
        sayIfNotServed(listing.scanned);
        return 0;
      }
      const reasons = Object.entries(listing.byReason).sort((a, b) => b[1] - a[1]).map(([r, n]) => `${r} ${n}`);
      out(`DLQ of ${query.model} (${where}): ${listing.scanned} record(s)${query.sinceAt === undefined ? '' : ` since ${new Date(query.sinceAt).toISOString()}`}`);
      if (reasons.length > 0) out(`  by reason: ${reasons.join(', ')}`);
      sayIfNotServed(listing.scanned);
      if (listing.matched > 0) {
        // Kafka keeps replayed records: say how many a replay would pass over.
        const replayed = listing.alreadyReplayed === undefined || listing.alreadyReplayed === 0 ? '' : `, ${listing.alreadyReplayed} of them already replayed`;
        out(`${listing.matched} match${query.reasons === undefined ? '' : `ing ${query.reasons.join(',')}`}${replayed}; the oldest ${listing.letters.length}:`);
        for (const l of listing.letters) out(describeLetter(l));
      }
      return 0;
    }
    if (sub === 'purge') return await purgeCommand(dl, query, values['dry-run'], values.json, config.transport.kind, out, sayIfNotServed);
    // Ctrl-C / SIGTERM, as publish handles them: the replay stops between records (Kafka: between
    // transactions) and says how many it re-sent, exit 130. Killed by the signal, it said nothing,
    // and on BullMQ the record in hand stayed claimed (the next replay skipped it for 120 s).
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    if (notServed !== undefined && !values['dry-run']) {
      // Re-sent, they would wait in a queue/topic no worker reads (and on BullMQ leave the DLQ):
      // refused like `publish` refuses such a model. An empty DLQ goes on to say so, exit 0.
      const { matched } = await dl.list({ ...query, limit: 1 });
      if (matched > 0) {
        throw new FleetError(
          'UNKNOWN_MODEL',
          `model "${query.model}" is not served by this fleet (${notServed}): no worker would read the ${matched} matching dead letter(s) re-sent to its request ${config.transport.kind === 'kafka' ? 'topics' : 'queue'}` +
            `${config.transport.kind === 'bullmq' ? ', and they would leave the DLQ' : ''}; nothing was sent. Deploy the model (or check --model and --config), then replay; --dry-run or dlq list shows them`,
          { details: { field: 'model' } },
        );
      }
    }
    if (stoppedBy !== undefined) {
      process.stderr.write(`npu-fleet: interrupted by ${stoppedBy} before dlq replay started: nothing was sent\n`);
      return EXIT.interrupted;
    }
    const report = await dl.replay({
      ...query,
      signal: stop.signal,
      dryRun: values['dry-run'],
      ...(priority === undefined ? {} : { priority }),
      ...(refreshDeadlineMs === undefined ? {} : { refreshDeadlineMs }),
      onProgress: ({ scanned, replayed }) => process.stderr.write(`dlq replay: ${scanned} read, ${replayed} ${values['dry-run'] ? 'would be ' : ''}re-sent\n`),
      onWarning: (message) => process.stderr.write(`dlq replay: warning: ${message}\n`),
    });
    /** After a stop signal: what went out, and that the same replay run again re-sends only the rest. */
    const interrupted = (signal: NodeJS.Signals): number => {
      const how =
        config.transport.kind === 'kafka'
          ? `each re-sent record is marked in ${renderName(config.transport.kafka.dlqTemplate, query.model)}.replayed and passed over`
          : 'each re-sent record left the DLQ, and none is left claimed';
      process.stderr.write(
        values['dry-run']
          ? `npu-fleet: interrupted by ${signal}: dlq replay --dry-run stopped after ${report.scanned} read (${report.replayed} would be re-sent); nothing was sent\n`
          : `npu-fleet: interrupted by ${signal}: dlq replay re-sent ${report.replayed} record(s) (${report.scanned} read) ${report.stopped === true ? 'before it stopped' : 'and had reached the end'}; ` +
              `running the same replay again is safe: ${how}, so it re-sends only what this one did not (exit ${EXIT.interrupted})\n`,
      );
      return EXIT.interrupted;
    };
    if (values.json) {
      out(JSON.stringify(report));
      sayIfNotServed(report.scanned, report.matched);
      return stoppedBy !== undefined ? interrupted(stoppedBy) : replayExitCode(report.skipped);
    }
    const verb = values['dry-run'] ? 'would re-send' : 're-sent';
    const to = `to their request ${config.transport.kind === 'kafka' ? 'topics' : 'queues'}`;
    // "re-sent 2 of 2 matching" read as if only 2 matched: the replay stops reading at --limit, so
    // how many match beyond it is not known (reading them all would be the cost of a dlq list).
    out(
      report.stopped === true
        ? `${verb} ${report.replayed} of the first ${report.matched} matching dead letter(s) (${report.scanned} read) ${to}; stopped by ${stoppedBy ?? 'a signal'} before the end of the DLQ`
        : report.stoppedAtLimit === true
          ? `${verb} ${report.replayed} of the first ${report.matched} matching dead letter(s) (${report.scanned} read) ${to}; stopped at --limit ${query.limit ?? ''}: more may match (dlq list counts them)`
          : `${verb} ${report.replayed} of ${report.matched} matching dead letter(s) (${report.scanned} read) ${to}`,
    );
    sayIfNotServed(report.scanned, report.matched);
    if (report.alreadyReplayed !== undefined && report.alreadyReplayed > 0) {
      // Not skips (exit 0): nothing is left to do for them.
      const why =
        config.transport.kind === 'kafka'
          ? 'the DLQ topic keeps replayed records; their re-sends carry npu-fleet-replay-of; dlq list shows when'
          : `a replay stopped before it removed their DLQ records; ${values['dry-run'] ? 'a real run removes them' : 'removed them now'}`;
      out(`  ${values['dry-run'] ? 'would pass' : 'passed'} over ${report.alreadyReplayed} already re-sent by an earlier replay (${why})`);
    }
    perRecord(out, values['dry-run'] ? 'would pass over' : 'passed over', report.passedOver ?? []);
    perRecord(out, values['dry-run'] ? 'would refresh' : 'refreshed', report.refreshed ?? []);
    perRecord(out, 'skipped', report.skipped);
    if (stoppedBy !== undefined) return interrupted(stoppedBy);
    const code = replayExitCode(report.skipped);
    if (code === DLQ_EXIT.onlyExpired) {
      out(`  only expired records are left (${report.skipped.length}): re-send them with --refresh-deadline DURATION, or discard them with dlq purge --expired (exit ${DLQ_EXIT.onlyExpired})`);
    }
    return code;
  } finally {
    await dl.close();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
