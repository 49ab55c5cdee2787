import { parseArgs, type ParseArgsConfig } from 'node:util';
import { FleetError } from '../errors/fleet-error.ts';

type Options = NonNullable<ParseArgsConfig['options']>;

/** What each command accepts; `npu-fleet COMMAND --help` prints its entry. */
export const COMMAND_USAGE = {
  start: `npu-fleet start [--config FILE] [--devices N] [--demo]
    The fleet: one worker per device (restarted with backoff), SIGTERM drains them all.
    With no config: memory broker, simulated devices, examples/models, built-in demo load.`,
  worker: `npu-fleet worker --device N [--config FILE]
    One device worker (what a Kubernetes pod runs). Serves /metrics /healthz /readyz.`,
  models: `npu-fleet models validate DIR [--load [--device N]]
    Checks a model repository (config.yaml schema, version directories, artifacts). --load also
    loads every version on device N (default 0) as a worker would and checks its tensors against
    config.yaml: the served ones, and the ones the versionPolicy does not serve now (marked "not
    served under versionPolicy ...", counted apart), since a rollback or a policy change would
    serve them. Any failure exits 1; move a version you will not serve out of DIR (or hide it with
    a leading '.').`,
  publish: `npu-fleet publish --model NAME [--count N] [--priority P] [--deadline-ms MS] [--await]
                  [--file REQUEST.json] [--timeout-ms MS] [--reply-to NAME] [--config FILE]
  npu-fleet publish --file DATA.jsonl [--await --out RESULTS.jsonl [--resume]] [--in-flight N] [...]
    Publishes requests (synthetic ones fitting the model, or a JSON request file) and
    optionally waits for each reply (--timeout-ms, default 30000, bounds the wait).
    DATA.jsonl (or .ndjson, or a .json array): many requests, read as a stream; with --out each
    reply (or why there is none: a bad line is an invalid record naming it) is appended to
    RESULTS.jsonl, at most --in-flight (default 1000) awaiting at once, progress on stderr.
    RESULTS is never overwritten: --resume sends only the ids without an ok result there.
    Logs (the producer's warnings) go to stderr. Exit 0: every request published (--await:
    answered ok); exit 4: the run went through, but a result was not ok, a line was refused as
    invalid, or a reply did not come within --timeout-ms (stderr says how many); exit 1: it
    stopped on an error (Redis or Kafka not answering, writing --out failing mid-run: the
    message says which), or no request at all was answered within --timeout-ms (no worker
    serving the model: it stops instead of timing out every line); exit 2: bad arguments, a
    --file that cannot be read, an --out that cannot be created or that was written for another
    file, a --priority past a model of the file (nothing sent); exit 130: interrupted (Ctrl-C,
    SIGTERM). See npu-fleet --help.`,
  load: `npu-fleet load --model NAME[,NAME...] [--rate R] [--seconds S] [--priority P] [--deadline-ms MS|LO-HI]
                  [--deadline-share X] [--max-samples N] [--timeout-ms MS] [--max-outstanding N] [--drain-ms MS]
                  [--config FILE]
    An open-loop synthetic load (default 100 req/s, until Ctrl-C) for capacity and autoscaling
    drills: mixed priorities unless --priority, a share (default 0.5) with deadlines (default
    50-500 ms). One line a second (sent, answered, ok p50/p99, batch fill, outcomes), a summary at
    the end; past --max-outstanding (default 20000) awaiting replies it holds back and says so.
    Once sending stops, replies still out are awaited --drain-ms (default 5000), then left
    uncounted (the summary says how many). Exit 0: every request sent was answered (any status)
    and some served ok in time; exit 4: some got no answer (no reply within --timeout-ms, still
    out after --drain-ms; stderr says how many); exit 1: none was answered (no worker serving the
    model?), none was served ok in time (all expired, late or errors: stderr says which, e.g. to
    raise --deadline-ms above the device time) or the run failed.`,
  frames: `npu-fleet frames --model NAME [--streams N] [--fps F] [--seconds S] [--deadline-ms MS] [--priority P]
                  [--timeout-ms MS] [--max-outstanding N] [--drain-ms MS] [--config FILE]
    A video pipeline's traffic: N cameras (default 4) each sending a one-sample frame every 1/F s
    (default 25 fps; fractional too, e.g. 29.97) keyed by camera (streamKey), each frame due
    within MS (default two frame intervals). A model with streams: { superseded: drop } answers
    displaced frames superseded.
    Same progress lines and summary as load, plus "out of order N": ok results for a frame older
    than one of its camera answered ok before (what a consumer would show as a jump back); the
    same --drain-ms (default 5000) and exit codes (exit 4: some frames got no answer; exit 1: none
    answered, or none served ok in time, e.g. all expired with a deadline below the device time).`,
  dlq: `npu-fleet dlq list|replay|purge --model NAME [--reason CODE[,CODE...]] [--since 2h|ISO-TIME-WITH-Z-OR-OFFSET] [--limit N]
                  [--priority P] [--refresh-deadline 30s|5m|2h] [--expired] [--dry-run] [--json] [--config FILE]
    list: the model's dead letters by reason, and the oldest matching ones (default 20).
    replay: re-sends each matching dead letter's original message to the request topic/queue it
    came from, at its priority, once the cause is fixed; the workers answer it again. BullMQ: a
    replayed record leaves the DLQ. Kafka: the DLQ topic keeps it, and a marker in <dlq>.replayed
    makes later replays pass it over (re-sent once).
    Records whose own deadline has passed are skipped (they would only be answered expired);
    --refresh-deadline D re-sends them, and any due sooner, with the deadline now + D (same
    priority; the re-send still names its DLQ record). Each record passed over, refreshed or
    skipped gets a line saying why.
    purge --expired: discards the matching records whose deadline has passed (BullMQ: removed;
    Kafka: a purge marker in <dlq>.replayed makes replays pass them over), one line each.
    --expired is required; records without a deadline or not expired are kept.
    replay --limit N re-sends at most N; a replay stopped there says so and that more may match
    (how many is not read: dlq list counts them).
    --dry-run counts what would be re-sent; --priority P is used for BullMQ records that recorded
    no priority (Kafka records have theirs in their topic); one past the model's priority levels
    is refused (exit 2), as by publish.
    Exit codes of replay and purge: 0 every matching record re-sent (purge: discarded or kept)
    or passed over, or none matched;
    3 only records whose deadline had passed were skipped (nothing else to do); 1 records were
    skipped for a cause to fix, or the replay failed (the message says which); 2 bad arguments;
    130 replay stopped by Ctrl-C or SIGTERM: it stops between records (Kafka: transactions) and
    says how many it re-sent; running it again is safe (a second signal exits at once).`,
} as const;

export type CommandName = keyof typeof COMMAND_USAGE;

/**
 * parseArgs with the CLI's manners: `--help`/`-h` prints the command's usage (returns undefined:
 * the caller exits 0), and a malformed command line becomes INVALID_ARGUMENT (exit 2) naming the
 * option and pointing at --help, instead of Node's TypeError and stack trace.
 */
export function parseCommandArgs<O extends Options>(
  command: CommandName,
  args: readonly string[],
  options: O,
  print: (text: string) => void = (t) => process.stdout.write(`${t}\n`),
): ReturnType<typeof parseArgs<{ args: string[]; options: O; allowPositionals: true }>> | undefined {
  if (args.includes('--help') || args.includes('-h')) {
    print(`Usage:\n  ${COMMAND_USAGE[command]}`);
    return undefined;
  }
  try {
    return parseArgs({ args: [...args], options, allowPositionals: true });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
      throw new FleetError('INVALID_ARGUMENT', `${parseArgsProblem(err as Error)} (run npu-fleet ${command} --help)`, { cause: err });
    }
    throw err;
  }
}

/** Node's parseArgs messages, shortened to the part that tells the user what to change. */
function parseArgsProblem(err: Error): string {
  const option = /'(-[^' ]*)/.exec(err.message)?.[1] ?? '';
  switch ((err as { code?: string }).code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option ${option}`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      if (/ambiguous/.test(err.message)) return `${option} needs a value (a value starting with '-' is written ${option}=VALUE)`;
      if (/does not take an argument/.test(err.message)) return `${option} takes no value`;
      return `${option} needs a value`;
    default:
      return err.message.split('\n')[0] ?? err.message;
  }
}

/** A positionals guard: commands that take none say so instead of ignoring a stray word. */
export function noPositionals(command: CommandName, positionals: readonly string[]): void {
  if (positionals.length > 0) {
    throw new FleetError('INVALID_ARGUMENT', `unexpected argument "${positionals[0]}" (run npu-fleet ${command} --help)`);
  }
}

/** An integer option within [min, max]; the error names the flag and the accepted range. */
export function intOption(flag: string, value: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer from ${min} to ${max}`;
    throw new FleetError('INVALID_ARGUMENT', `--${flag} must be ${range}, got "${value}"`, { details: { field: flag } });
  }
  return n;
}

/** A positive finite number of milliseconds. */
export function msOption(flag: string, value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0) {
    throw new FleetError('INVALID_ARGUMENT', `--${flag} must be a positive number of milliseconds, got "${value}"`, { details: { field: flag } });
  }
  return n;
}

/**
 * A positive whole number of milliseconds, for flags that set a `deadlineAt`: requests carry whole
 * epoch ms, so a fraction would make every request invalid, naming deadlineAt instead of the flag.
 */
export function wholeMsOption(flag: string, value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isSafeInteger(n) || n <= 0) {
    throw new FleetError('INVALID_ARGUMENT', `--${flag} must be a positive whole number of milliseconds, got "${value}"`, { details: { field: flag } });
  }
  return n;
}
