import { Redis, type RedisOptions } from 'ioredis';
import { FleetError } from '../../errors/fleet-error.ts';

/**
 * BullMQ priority: 0 means "no priority" (a separate FIFO list served BEFORE every prioritized
 * job), 1 is the most urgent prioritized value. Request priority p therefore maps to p + 1, so
 * every request is prioritized and FIFO holds within a priority.
 */
export function toBullmqPriority(priority: number): number {
  return priority + 1;
}

export function fromBullmqPriority(jobPriority: number | undefined): number | undefined {
  return jobPriority !== undefined && jobPriority > 0 ? jobPriority - 1 : undefined;
}

/**
 * `jobId = id` whenever BullMQ accepts it. BullMQ refuses ids that are integers ("42") or contain
 * ':'; those (and ids starting with '~', to keep the mapping one-to-one) become '~' + base64url.
 */
export function jobIdFor(requestId: string): string {
  const integer = `${Number.parseInt(requestId, 10)}` === requestId;
  if (!integer && !requestId.includes(':') && !requestId.startsWith('~')) return requestId;
  return `~${Buffer.from(requestId, 'utf8').toString('base64url')}`;
}


/** One ioredis connection with the options BullMQ requires (retry forever on worker connections). */
export function redisConnection(redisUrl: string, extra: RedisOptions = {}): Redis {
  try {
    const connection = new Redis(redisUrl, { maxRetriesPerRequest: null, enableReadyCheck: true, ...extra });
    // First listener, so every later one (BullMQ's, the loggers') sees the error without the password.
    connection.on('error', hideCredentials);
    return connection;
  } catch (err) {
    // The URL may carry a password: errors name only where it points.
    const where = redisHost(redisUrl);
    throw new FleetError(
      'INVALID_CONFIG',
      `transport.bullmq.redisUrl ${where.startsWith('(') ? where : `(${where})`} is not a usable Redis URL: ${(err as Error).message}; ` +
        'write it as redis://[user:password@]host:port[/db] (rediss:// for TLS)',
      { cause: err },
    );
  }
}

/**
 * ioredis puts the command a reply failed into the error, arguments and all: a refused AUTH (or
 * HELLO ... AUTH) carried the password of transport.bullmq.redisUrl into every log line of a
 * connection error, on each reconnect. Masks it in place (the same error object reaches every
 * listener and the rejected commands).
 */
export function hideCredentials(err: unknown): void {
  const command = (err as { command?: { name?: unknown; args?: unknown } } | undefined)?.command;
  if (command === undefined || !Array.isArray(command.args)) return;
  const args: unknown[] = command.args;
  const name = String(command.name).toLowerCase();
  if (name === 'auth') command.args = args.map((a, i) => (i === args.length - 1 ? '***' : a));
  else if (name === 'hello') {
    const at = args.findIndex((a) => String(a).toUpperCase() === 'AUTH');
    if (at >= 0) command.args = args.map((a, i) => (i === at + 2 ? '***' : a));
  }
}

/** The user a Redis URL logs in as ('default' when it names none). */
function redisUser(redisUrl: string): string {
  try {
    return decodeURIComponent(new URL(redisUrl).username) || 'default';
  } catch {
    return 'default';
  }
}

/** host:port of a Redis URL, without credentials (it goes into errors and logs). */
export function redisHost(redisUrl: string): string {
  try {
    const u = new URL(redisUrl);
    return `${u.hostname}:${u.port === '' ? '6379' : u.port}`;
  } catch {
    return '(unparsable URL)';
  }
}

/**
 * Resolves once Redis answers a PING, else fails with an error naming the setting to check. With
 * maxRetriesPerRequest null (which BullMQ workers require) every command, and so BullMQ's own
 * start-up, would otherwise wait for Redis forever.
 */
export async function ensureRedisAnswers(
  connection: Redis,
  redisUrl: string,
  timeoutMs: number,
  what = 'starting the bullmq transport failed',
): Promise<void> {
  let lastError: Error | undefined;
  const onError = (err: Error): void => void (lastError = err);
  connection.on('error', onError);
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  try {
    await Promise.race([
      connection.ping(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          timedOut = true;
          reject(lastError ?? new Error('no answer'));
        }, timeoutMs);
      }),
    ]);
  } catch (err) {
    hideCredentials(err);
    const where = `Redis at ${redisHost(redisUrl)}`;
    const refusal = loginRefusal(err, where, redisUrl);
    if (refusal !== undefined) throw new FleetError('TRANSPORT_ERROR', `${what}: ${refusal}`, { cause: err, retriable: false });
    const happened = timedOut ? `${where} did not answer within ${timeoutMs} ms` : `${where} refused the connection check`;
    throw new FleetError(
      'TRANSPORT_ERROR',
      `${what}: ${happened} (${(err as Error).message}); check transport.bullmq.redisUrl and that redis-server is up and reachable from here`,
      { cause: err, retriable: true },
    );
  } finally {
    clearTimeout(timer);
    connection.off('error', onError);
  }
}

/**
 * The words for a login Redis refused (WRONGPASS, or NOAUTH: a password is needed and the URL has
 * none). Not retriable: the same URL is refused again, where the generic message sent the
 * operator to look whether redis-server is up.
 */
function loginRefusal(err: unknown, where: string, redisUrl: string): string | undefined {
  const message = (err as Error | undefined)?.message ?? '';
  const user = redisUser(redisUrl);
  if (/^WRONGPASS|invalid password|invalid username-password/i.test(message)) {
    return `${where} refused the login of transport.bullmq.redisUrl (user ${user}); check the user name and password (redis://user:password@host:port; a password alone: redis://:password@host:port)`;
  }
  if (/^NOAUTH/i.test(message)) {
    return `${where} wants a login and transport.bullmq.redisUrl has no password; write it as redis://user:password@host:port (a password alone: redis://:password@host:port)`;
  }
  return undefined;
}

export function bullmqError(err: unknown, what: string): FleetError {
  if (err instanceof FleetError) return err;
  return new FleetError('TRANSPORT_ERROR', `${what}: ${(err as Error)?.message ?? String(err)}`, { cause: err });
}

/** Job retention: results and DLQ records are read once; keep them a while for inspection. */
export const KEEP_COMPLETED = { age: 3_600, count: 10_000 } as const;
export const KEEP_FAILED = { age: 24 * 3_600 } as const;
