import { pino, type Logger, type LoggerOptions } from 'pino';
import { redactUrl } from '../errors/redact-url.ts';

export type { Logger } from 'pino';

/**
 * Payloads (tensor bytes, message bodies, meta) are never logged: these paths are censored even if
 * a caller passes an envelope by mistake.
 */
export const REDACTED_PATHS = [
  'inputs',
  'outputs',
  'data',
  'body',
  'meta',
  '*.inputs',
  '*.outputs',
  '*.data',
  '*.body',
  '*.meta',
  'request.inputs',
  'result.outputs',
];

/**
 * Credentials (transport.kafka.sasl.password) are censored wherever a caller is likely to log the
 * settings holding them (the password, sasl, kafka, transport, a whole config, under any key): no
 * code path logs them today, and logs are kept and shipped far wider than the config. Only the
 * first segment is a wildcard: a wildcard below it would walk every index of a Buffer found there.
 */
export const SECRET_PATHS = [
  'password',
  '*.password',
  'sasl.password',
  '*.sasl.password',
  'kafka.sasl.password',
  '*.kafka.sasl.password',
  'transport.kafka.sasl.password',
  '*.transport.kafka.sasl.password',
];

const SECRET_KEYS = new Set(['password']);

/** What pino's err serializer makes an Error into (its own fields are what is printed). */
const SERIALIZED_ERROR_PROTO: unknown = Object.getPrototypeOf(pino.stdSerializers.err(new Error('probe')));

/**
 * pino's err serializer, with the message each cause adds only when it is not already in it:
 * pino appends every cause's message, and a FleetError quotes its cause's already (toFleetError,
 * kafkaError), so a binding failure was logged with its ACL text twice.
 */
function serializeError(err: unknown): unknown {
  const out = pino.stdSerializers.err(err as Error) as { message?: unknown };
  if (!(err instanceof Error)) return out;
  let message = err.message;
  const seen = new Set<unknown>([err]);
  for (let cause: unknown = err.cause; cause instanceof Error && !seen.has(cause); cause = cause.cause) {
    seen.add(cause);
    if (cause.message !== '' && !message.includes(cause.message)) message = `${message}: ${cause.message}`;
  }
  out.message = message;
  return out;
}

/** Deep enough for a whole fleet config; below it values are logged as they are. */
const URL_SCRUB_MAX_DEPTH = 8;

/**
 * A copy of `value` with the login of every URL in its strings censored (redactUrl), or `value`
 * itself when none holds one: a URL with a password (transport.bullmq.redisUrl, a proxy) may sit
 * under any key, in a message or in an error, where SECRET_PATHS cannot name it. A URL object
 * becomes its censored href (as logged it was its href; its getters also threw in the censor of
 * SECRET_PATHS). An Error under the `err` key is left to the err serializer (it reads the message,
 * stack and causes); under any other key it becomes what JSON would print of it (its own fields).
 */
function scrubUrls(value: unknown, depth: number, key?: string): unknown {
  if (typeof value === 'string') return redactUrl(value);
  if (typeof value !== 'object' || value === null || depth >= URL_SCRUB_MAX_DEPTH) return value;
  if (value instanceof URL) return redactUrl(value.href);
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return value;
  if (value instanceof Error) return key === 'err' ? value : scrubUrls({ ...value }, depth + 1);
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    value.forEach((item: unknown, i) => {
      const scrubbed = scrubUrls(item, depth + 1);
      if (scrubbed !== item) (copy ??= [...value])[i] = scrubbed;
    });
    return copy ?? value;
  }
  const proto: unknown = Object.getPrototypeOf(value);
  // Other classes are left as they are: what JSON prints of them (a Date's toJSON) a copy would lose.
  if (proto !== Object.prototype && proto !== null && proto !== SERIALIZED_ERROR_PROTO) return value;
  let copy: Record<string, unknown> | undefined;
  for (const [k, item] of Object.entries(value)) {
    const scrubbed = scrubUrls(item, depth + 1, k);
    if (scrubbed !== item) (copy ??= { ...value })[k] = scrubbed;
  }
  return copy ?? value;
}

export interface LoggerSetup {
  level?: LoggerOptions['level'];
  /** Where logs go; default stdout. Tests pass a stream to capture lines. */
  destination?: pino.DestinationStream;
  base?: Record<string, unknown>;
}

/** Lines kept for a reader that does not keep up (a full pipe); past it, lines are dropped. */
export const LOG_BACKLOG_MAX_BYTES = 8 * 1024 * 1024;

/**
 * stdout for logs, such that a log sink that broke can neither keep the process alive nor crash it.
 * pino's default stdout stream writes asynchronously and flushes what it holds at exit, retrying a
 * failed write every 100 ms for good: a pipe whose reader died (EPIPE: a log shipper gone, `| head`)
 * with lines still held at exit, or a hung-up terminal (EIO), made the process spin at exit forever;
 * and any error but EPIPE was thrown from the write's callback, ending the process mid-drain.
 * Here each line is written at once (nothing held, so nothing to flush at exit); a full pipe
 * (EAGAIN: the reader is alive but behind) keeps the line for the next write instead of waiting
 * (LOG_BACKLOG_MAX_BYTES bound it; what it still holds at exit is lost rather than waited for); any
 * other error ends logging to it for good.
 */
export function stdoutLogSink(fd: number = (process.stdout as { fd?: number }).fd ?? 1): pino.DestinationStream {
  const sink = pino.destination({ dest: fd, sync: true, maxLength: LOG_BACKLOG_MAX_BYTES, retryEAGAIN: () => false });
  const dead = (): void => undefined;
  sink.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EAGAIN' || err.code === 'EBUSY') return;
    sink.write = () => true;
    sink.flushSync = dead;
    sink.flush = dead;
    sink.end = dead;
  });
  return sink;
}

/**
 * The same sink on stderr: for a command whose stdout carries its own lines (`npu-fleet start`'s
 * status line a second), which the JSON logs must not mix into.
 */
export function stderrLogSink(): pino.DestinationStream {
  return stdoutLogSink((process.stderr as { fd?: number }).fd ?? 2);
}

export function createLogger(setup: LoggerSetup = {}): Logger {
  const options: LoggerOptions = {
    level: setup.level ?? process.env.NPU_FLEET_LOG_LEVEL ?? 'info',
    base: { pid: process.pid, ...setup.base },
    redact: { paths: [...REDACTED_PATHS, ...SECRET_PATHS], censor: (_value: unknown, path: string[]) => (SECRET_KEYS.has(path.at(-1) ?? '') ? '[secret]' : '[payload]') },
    formatters: { log: (object) => scrubUrls(object, 0) as Record<string, unknown> },
    serializers: { err: (err: unknown) => scrubUrls(serializeError(err), 0) },
    hooks: {
      // The message and its %s arguments: a URL put into the text rather than into a field.
      logMethod(args, method) {
        method.apply(this, args.map((a: unknown) => (typeof a === 'string' ? redactUrl(a) : a)) as Parameters<typeof method>);
      },
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return pino(options, setup.destination ?? stdoutLogSink());
}

/** Bounded bindings only: component/device/model (never request ids as labels of a series). */
export interface LogBindings {
  component: string;
  device?: number;
  model?: string;
}

export function childLogger(parent: Logger, bindings: LogBindings): Logger {
  return parent.child(bindings);
}
