import type { FleetError } from '../errors/fleet-error.ts';
import { EXIT_DRAIN_TIMEOUT, EXIT_FATAL, EXIT_HANG, EXIT_START_TIMEOUT } from '../runtime/worker-process.ts';

/**
 * Exit codes of the npu-fleet commands: one scheme for all, printed by `npu-fleet --help`
 * (EXIT_CODES_HELP). A CI job or a cron script must tell a run that went wrong (1) from one that
 * went through with requests left without their answer (4), without parsing what was printed.
 */
export const EXIT = {
  ok: 0,
  /**
   * The command failed, or stopped on an error (the message on stderr); load/frames: no request
   * was answered at all, or none was served ok in time (every answer expired, late or an error).
   */
  failed: 1,
  /**
   * Bad arguments or config: nothing was done. publish: also a --file that cannot be read and an
   * --out that cannot be created (its directory missing or not writable); a write to --out that
   * fails during the run (a full disk) stops it on an error (1).
   */
  usage: 2,
  /** dlq replay / purge: only records whose deadline had passed were skipped. */
  onlyExpired: 3,
  /**
   * publish, load, frames ran to their end, but not every request got its answer: publish, a
   * result other than ok, a line refused before sending (invalid) or no reply within --timeout-ms;
   * load and frames, no reply within --timeout-ms (or still out after --drain-ms).
   */
  notAllAnswered: 4,
  /** publish: stopped by Ctrl-C, SIGTERM or stdout closing before the end; dlq replay: stopped by Ctrl-C or SIGTERM. */
  interrupted: 130,
} as const;

/** The table `npu-fleet --help` prints. */
export const EXIT_CODES_HELP = `Exit codes (every command):
  ${EXIT.ok}    done: publish, every request published (--await: answered ok); load/frames, every
       request answered and some served ok; dlq, every record handled; worker/start, stopped and
       drained
  ${EXIT.failed}    failed, or stopped on an error (message on stderr); load/frames: no request answered at all,
       or none served ok in time (all expired, late or errors; stderr says which); dlq
       replay/purge: records skipped for a cause to fix; models validate: a model not servable
  ${EXIT.usage}    bad arguments or config; nothing was done (publish: also a --file that cannot be read, an
       --out that cannot be created; writing --out failing later, e.g. a full disk, is 1; start: also the
       workers of every device refusing their config at start-up three times in a row, e.g. a config
       file edited while running)
  ${EXIT.onlyExpired}    dlq replay/purge: only records whose deadline had passed were skipped
  ${EXIT.notAllAnswered}    publish, load, frames: ran to the end, but not every request answered (publish: a result
       not ok, a line refused as invalid, or no reply in --timeout-ms; load/frames: no reply in
       --timeout-ms / --drain-ms); stderr says how many
  ${EXIT.interrupted}  publish: interrupted (Ctrl-C, SIGTERM, stdout closed); dlq replay: interrupted (Ctrl-C,
       SIGTERM; stderr says how many records it re-sent); a signal before a command started: 128 + its number
  ${EXIT_FATAL}   worker: the broker refuses it for good
  ${EXIT_DRAIN_TIMEOUT}   worker: the drain ran out of worker.drainTimeoutMs (what was left went back to the broker)
  ${EXIT_START_TIMEOUT}   worker: start-up did not finish within worker.startTimeoutMs
  ${EXIT_HANG}   worker: a device hang (the supervisor restarts it)`;

/**
 * The exit code of a command stopped by `err`: a bad argument or config (or an unserved model named
 * by a flag, or by a whole request file, checked before anything is sent) is 2, anything else 1.
 * Per-request failures are results, not errors of the command.
 */
export function exitCodeOf(err: FleetError): number {
  return err.code === 'INVALID_ARGUMENT' || err.code === 'INVALID_CONFIG' || err.code === 'UNKNOWN_MODEL' ? EXIT.usage : EXIT.failed;
}
