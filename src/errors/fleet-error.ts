import { redactUrl } from './redact-url.ts';

/**
 * The one error class of npu-fleet. Every failure that crosses a module boundary is a FleetError
 * with a stable `code` (safe to alert and branch on), a `retriable` flag (may the same work succeed
 * if tried again?) and the underlying `cause`. One request's failure becomes that request's
 * result (see runtime), never the batch's.
 */
export const ERROR_CODES = {
  // input / validation (not retriable: the same bytes fail the same way)
  INVALID_CONFIG: false,
  INVALID_MESSAGE: false,
  INVALID_ARGUMENT: false,
  LIMIT_EXCEEDED: false,
  UNKNOWN_MODEL: false,
  UNSUPPORTED_OP: false,
  MODEL_LOAD_FAILED: false,
  // admission / lifecycle
  QUEUE_FULL: true,
  // a newer frame of the same streamKey arrived while this one was queued (model streams.superseded: drop);
  // retrying would only be superseded again
  SUPERSEDED: false,
  SHUTTING_DOWN: true,
  DEADLINE_EXCEEDED: false,
  CLOSED: false,
  // device / native
  NATIVE_LOAD_FAILED: false,
  DEVICE_ERROR: true,
  DEVICE_OUT_OF_MEMORY: true,
  DEVICE_TIMEOUT: true,
  DEVICE_HANG: true,
  // BullMQ gave up on a job whose worker died holding it too often (see stall-reaper.ts)
  WORKER_CRASHED: false,
  // BullMQ (jobId = id): the request's id belongs to a job of other inputs not yet answered, so its
  // add was dropped; the same publish succeeds once that job is answered (earlier-jobs.ts)
  ID_IN_USE: true,
  // transport / services
  TRANSPORT_ERROR: true,
  SERVICE_UNAVAILABLE: true,
  TIMEOUT: true,
  INTERNAL: false,
} as const satisfies Record<string, boolean>;

export type ErrorCode = keyof typeof ERROR_CODES;

export interface FleetErrorOptions {
  cause?: unknown;
  /** Overrides the code's default retriability. */
  retriable?: boolean;
  /** Bounded, non-payload details (field path, limit, aclError number...). */
  details?: Record<string, unknown>;
}

export class FleetError extends Error {
  override readonly name = 'FleetError';
  readonly code: ErrorCode;
  readonly retriable: boolean;
  readonly details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, options: FleetErrorOptions = {}) {
    // A message built with a URL (transport.bullmq.redisUrl, a proxy) names where, never the login:
    // FleetErrors go into logs, result envelopes, DLQ records and what the CLI prints.
    super(redactUrl(message), options.cause === undefined ? undefined : { cause: options.cause });
    censorUrlsOfCauses(options.cause);
    this.code = code;
    this.retriable = options.retriable ?? ERROR_CODES[code];
    this.details = options.details ?? {};
  }

  /** The `{code, message}` pair carried in a result envelope's `error` field. */
  toResultError(): { code: ErrorCode; message: string } {
    return { code: this.code, message: this.message };
  }

  static is(value: unknown, code?: ErrorCode): value is FleetError {
    return value instanceof FleetError && (code === undefined || value.code === code);
  }

  /** Wraps anything thrown into a FleetError, keeping the original as `cause`. */
  static from(value: unknown, code: ErrorCode = 'INTERNAL'): FleetError {
    if (value instanceof FleetError) return value;
    const message = value instanceof Error ? value.message : String(value);
    return new FleetError(code, message, { cause: value });
  }
}

/** Fields of an error that Node prints and may quote a URL: ERR_INVALID_URL keeps the whole text as `input`. */
const QUOTING_FIELDS = ['message', 'stack', 'input'] as const;
const CAUSES_MAX = 8;

/**
 * The causes a FleetError keeps, with the login of a URL they quote censored in place: a caller
 * logging the cause, or Node printing an uncaught FleetError (causes and their fields included),
 * would show it. ioredis throws Node's URL error, the URL in `input`, for a redisUrl it cannot
 * parse; the same error object is nobody else's by then.
 */
function censorUrlsOfCauses(cause: unknown): void {
  let at = cause;
  for (let i = 0; i < CAUSES_MAX && typeof at === 'object' && at !== null && !(at instanceof FleetError); i++) {
    const fields = at as Record<string, unknown>;
    for (const field of QUOTING_FIELDS) {
      const text = Object.prototype.hasOwnProperty.call(fields, field) ? fields[field] : undefined;
      if (typeof text !== 'string') continue;
      const censored = redactUrl(text);
      if (censored === text) continue;
      try {
        fields[field] = censored;
      } catch {
        // A frozen error cannot be censored; it keeps what it says.
      }
    }
    at = fields.cause;
  }
}
