import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Redis, type RedisOptions } from 'ioredis';
import { settingFix, settingOrigin } from '../../contracts/config-loader.ts';
import type { BullmqSettings } from '../../contracts/fleet-config.ts';
import { FleetError } from '../../errors/fleet-error.ts';

/** What a Redis connection of the bullmq transport is made from. */
export type RedisTarget = Pick<BullmqSettings, 'redisUrl'> & Partial<Pick<BullmqSettings, 'tls' | 'sentinel' | 'connectTimeoutMs'>>;

/** One ioredis connection with the options BullMQ requires (retry forever on worker connections). */
export function redisConnection(targetOrUrl: RedisTarget | string, extra: RedisOptions = {}): Redis {
  const target = typeof targetOrUrl === 'string' ? { redisUrl: targetOrUrl } : targetOrUrl;
  const tls = redisTlsOptions(target.tls);
  let connection: Redis;
  try {
    connection = new Redis(target.redisUrl, {
      maxRetriesPerRequest: null,
      enableReadyCheck: true,
      ...(tls === undefined ? {} : { tls }),
      ...sentinelOptions(target.sentinel, target.connectTimeoutMs),
      ...extra,
    });
  } catch (err) {
    // The URL may carry a password: errors name only where it points.
    const where = redisHost(target.redisUrl);
    throw new FleetError(
      'INVALID_CONFIG',
      `transport.bullmq.redisUrl ${where.startsWith('(') ? where : `(${where})`} is not a usable Redis URL: ${(err as Error).message}; ` +
        'write it as redis://[user:password@]host:port[/db] (rediss:// for TLS)',
      { cause: err },
    );
  }
  // First listener, so every later one (BullMQ's, the loggers') sees the error without the password.
  connection.on('error', hideCredentials);
  const sentinel = target.sentinel;
  if (sentinel !== undefined) {
    connection.on('sentinelError', (err: Error) => askLast(sentinel, err));
    followSwitchMaster(connection, sentinel);
  }
  return connection;
}

/**
 * The order new connections ask the sentinels in, per transport.bullmq.sentinel. ioredis starts
 * every connection at the first listed: with that one frozen, each connection of a start (the
 * shared one, then each model's worker and its blocking duplicate, one after the other) waited
 * SENTINEL_ANSWER_MS on it (measured: 4.1 s to start one model and answer a first request).
 */
const sentinelOrder = new Map<string, readonly string[]>();

function orderKey(sentinel: NonNullable<BullmqSettings['sentinel']>): string {
  return `${sentinel.name}@${sentinel.sentinels.join(',')}`;
}

/** A sentinel that failed a connection (no answer, refused, or no such master) is asked last by the connections made after. */
function askLast(sentinel: NonNullable<BullmqSettings['sentinel']>, err: Error): void {
  // ioredis names the sentinel only in the message: 'failed to connect to sentinel host:port because ...'
  // or 'connected to sentinel host:port successfully, but got an invalid reply ...'.
  const address = /sentinel (\S+) (?:because|successfully)/.exec(err.message)?.[1];
  const order = sentinelOrder.get(orderKey(sentinel)) ?? sentinel.sentinels;
  if (address === undefined || !order.includes(address) || order.at(-1) === address) return;
  sentinelOrder.set(orderKey(sentinel), [...order.filter((a) => a !== address), address]);
}

/**
 * On the sentinels' +switch-master for our master, an established connection is dropped and
 * dialled again (ioredis asks the sentinels, so it reaches the promoted master). Without it a
 * connection moves only on its own 'close': a master frozen (SIGSTOP, a hung host) keeps it open
 * and silent, so a worker waited on the old master for good after the replica was promoted.
 * Not ioredis's failoverDetector: it also ends a connection that is reconnecting (asking a
 * sentinel after the master died) and that connection then stays ended for good; here only a
 * 'ready' one is dropped, the others find the new master as they reconnect.
 */
function followSwitchMaster(connection: Redis, sentinel: NonNullable<BullmqSettings['sentinel']>): void {
  const watchers = sentinelOptions(sentinel).sentinels?.map((address) => {
    const watcher = new Redis({
      ...(address as { host: string; port: number }),
      ...(sentinel.username === undefined ? {} : { username: sentinel.username }),
      ...(sentinel.password === undefined ? {} : { password: sentinel.password }),
      connectionName: 'npu-fleet-switch-master',
      maxRetriesPerRequest: null,
    });
    // A sentinel away is the connection's own concern (it asks the others); this one retries quietly.
    watcher.on('error', () => undefined);
    watcher.on('message', (_channel: string, message: string) => {
      if (message.split(' ')[0] === sentinel.name && connection.status === 'ready') connection.disconnect(true);
    });
    void watcher.subscribe('+switch-master').catch(() => undefined);
    return watcher;
  });
  connection.once('end', () => {
    for (const w of watchers ?? []) w.disconnect();
  });
}

/**
 * The longest a connection waits for one sentinel's answer before asking the next. ioredis's
 * default is no limit: a frozen sentinel (SIGSTOP, a hung host or VM) takes the TCP connection and
 * never answers, so a start that asked it first failed after connectTimeoutMs although two other
 * sentinels were up, and a connection re-dialling after its master died stayed 'connecting' for good
 * once it asked that one (measured: 105 of 300 served, nothing more for 60 s after the promotion).
 * A sentinel answers GET-MASTER-ADDR-BY-NAME from memory, so a second is long; capped at
 * connectTimeoutMs / sentinels, so with every sentinel but the last frozen a start still fits.
 */
const SENTINEL_ANSWER_MS = 1_000;

/**
 * ioredis Sentinel options: with them ioredis asks the sentinels for the master, and again after
 * a failover, and the URL's host:port are not dialled (its login, db and scheme still apply).
 */
function sentinelOptions(sentinel: BullmqSettings['sentinel'], connectTimeoutMs?: number): RedisOptions {
  if (sentinel === undefined) return {};
  const share = connectTimeoutMs === undefined ? SENTINEL_ANSWER_MS : Math.floor(connectTimeoutMs / sentinel.sentinels.length);
  return {
    sentinelCommandTimeout: Math.max(1, Math.min(SENTINEL_ANSWER_MS, share)),
    name: sentinel.name,
    sentinels: (sentinelOrder.get(orderKey(sentinel)) ?? sentinel.sentinels).map((hostPort) => {
      const at = hostPort.lastIndexOf(':');
      return { host: hostPort.slice(0, at), port: Number(hostPort.slice(at + 1)) };
    }),
    ...(sentinel.username === undefined ? {} : { sentinelUsername: sentinel.username }),
    ...(sentinel.password === undefined ? {} : { sentinelPassword: sentinel.password }),
  };
}

/** Where a target points, for errors and logs: host:port, or the master name and its sentinels; never a password. */
export function redisWhere(target: RedisTarget): string {
  const s = target.sentinel;
  return s === undefined ? `Redis at ${redisHost(target.redisUrl)}` : `Redis master ${s.name} via the sentinels ${s.sentinels.join(', ')}`;
}

/** ioredis TLS options from transport.bullmq.tls; the PEM files are read here, so a bad path fails at start-up naming the field. */
export function redisTlsOptions(tls: BullmqSettings['tls']): ConnectionOptions | undefined {
  if (tls === undefined) return undefined;
  const read = (field: 'caFile' | 'certFile' | 'keyFile', path: string | undefined): Buffer | undefined => {
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (cause) {
      // Where the path came from: a variable is named (the file does not show it), else the file.
      const fix = settingOrigin(tls, [field]).kind === 'unknown' ? '' : `; ${settingFix(tls, [field])}`;
      throw new FleetError('INVALID_CONFIG', `transport.bullmq.tls.${field}: cannot read ${path} (${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message})${fix}`, {
        cause,
        details: { field: `transport.bullmq.tls.${field}` },
      });
    }
  };
  const ca = read('caFile', tls.caFile);
  const cert = read('certFile', tls.certFile);
  const key = read('keyFile', tls.keyFile);
  return {
    rejectUnauthorized: tls.rejectUnauthorized,
    ...(ca === undefined ? {} : { ca: [ca] }),
    ...(cert === undefined ? {} : { cert }),
    ...(key === undefined ? {} : { key }),
  };
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

const TLS_FAILURE = /certificate|self[- ]signed|SSL routines|wrong version number|packet length|TLS connection|ERR_TLS|CERT_|UNABLE_TO_VERIFY|EPROTO/i;

function isTlsFailure(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | undefined;
  return TLS_FAILURE.test(`${String(e?.code ?? '')} ${String(e?.message ?? '')}`);
}

/**
 * Resolves once Redis answers a PING, else fails with an error naming the setting to check. With
 * maxRetriesPerRequest null (which BullMQ workers require) every command, and so BullMQ's own
 * start-up, would otherwise wait for Redis forever.
 */
export async function ensureRedisAnswers(
  connection: Redis,
  targetOrUrl: RedisTarget | string,
  timeoutMs: number,
  what = 'starting the bullmq transport failed',
): Promise<void> {
  const target = typeof targetOrUrl === 'string' ? { redisUrl: targetOrUrl } : targetOrUrl;
  let lastError: Error | undefined;
  let failFast: (err: Error) => void = () => undefined;
  const onError = (err: Error): void => {
    lastError = err;
    // ioredis retries a failed handshake forever: the same certificate fails the same way, so
    // waiting out connectTimeoutMs only delays the answer.
    if (isTlsFailure(err)) failFast(err);
  };
  connection.on('error', onError);
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  try {
    await Promise.race([
      connection.ping(),
      new Promise<never>((_, reject) => {
        failFast = reject;
        timer = setTimeout(() => {
          timedOut = true;
          reject(lastError ?? new Error('no answer'));
        }, timeoutMs);
      }),
    ]);
  } catch (err) {
    hideCredentials(err);
    const where = redisWhere(target);
    const refusal = loginRefusal(err, where, target.redisUrl);
    if (refusal !== undefined) throw new FleetError('TRANSPORT_ERROR', `${what}: ${refusal}`, { cause: err, retriable: false });
    if (isTlsFailure(err)) {
      throw new FleetError(
        'TRANSPORT_ERROR',
        `${what}: TLS to ${where} failed (${(err as Error).message}); check transport.bullmq.tls (caFile for a private CA, certFile/keyFile for mutual TLS) ` +
          'and that the URL scheme matches the server: rediss:// for a TLS port, redis:// for a plain one',
        { cause: err, retriable: false },
      );
    }
    // isCommandTimeout: a connection with commandTimeout (the producer's) gives up the PING itself.
    const unanswered = timedOut || isCommandTimeout(err);
    const happened = unanswered ? `${where} did not answer within ${timeoutMs} ms` : `${where} refused the connection check`;
    const check =
      target.sentinel === undefined
        ? 'check transport.bullmq.redisUrl and that redis-server is up and reachable from here'
        : 'check transport.bullmq.sentinel (the master name and the sentinels) and that the sentinels and the master are up and reachable from here';
    // The wait was connectTimeoutMs: a Redis slow for a while (a long fork, a loaded host) needs it raised, not a new URL.
    const orWait = unanswered ? ', or raise transport.bullmq.connectTimeoutMs for a Redis that is slow for a while' : '';
    // A PING given up by commandTimeout says only "Command timed out": the connection's own last
    // error (ECONNREFUSED, ENOTFOUND) is what tells a wrong port or host from a slow Redis.
    const why = unanswered && lastError !== undefined ? lastError.message : (err as Error).message;
    throw new FleetError('TRANSPORT_ERROR', `${what}: ${happened} (${why}); ${check}${orWait}`, { cause: err, retriable: true });
  } finally {
    clearTimeout(timer);
    connection.off('error', onError);
  }
  await refuseCluster(connection, target, what);
}

/** ioredis's rejection of a command that got no answer within the connection's commandTimeout. */
export function isCommandTimeout(err: unknown): boolean {
  return (err as Error | undefined)?.message === 'Command timed out';
}

/**
 * A Redis Cluster node answers PING like any Redis, and BullMQ's scripts then fail per command
 * (keys of one queue in other slots, MOVED to nodes a single connection never dials). Cluster is
 * not supported (see docs/redis.md): refused here, at start, rather than at the first job.
 */
async function refuseCluster(connection: Redis, target: RedisTarget, what: string): Promise<void> {
  let info: string;
  try {
    info = await connection.info('cluster');
  } catch {
    // Not answering INFO is no Cluster sign; the commands that follow report Redis trouble.
    return;
  }
  if (!/^cluster_enabled:1\b/m.test(info)) return;
  throw new FleetError(
    'INVALID_CONFIG',
    `${what}: ${redisWhere(target)} is a Redis Cluster node (cluster_enabled:1); npu-fleet does not support Redis Cluster: ` +
      'point transport.bullmq.redisUrl at a standalone Redis or use transport.bullmq.sentinel (docs/redis.md)',
    { details: { field: 'transport.bullmq.redisUrl' } },
  );
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
