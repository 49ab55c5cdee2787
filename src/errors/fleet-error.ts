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
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
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
