import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Kafka, logLevel, type Admin, type ISocketFactory, type ITopicConfig, type SASLOptions } from 'kafkajs';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { FleetError } from '../../errors/fleet-error.ts';
import { kafkaLogCreator } from './kafka-log-creator.ts';

export { kafkaLogCreator, SEND_GIVEN_UP } from './kafka-log-creator.ts';

/** pino-compatible subset; transports log through it (kafkajs's own console logger stays off). */
export interface TransportLogger {
  error(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

/** kafkajs's retries per request when the caller sets none (createKafka). */
export const DEFAULT_KAFKA_RETRIES = 8;

export function createKafka(
  settings: Pick<KafkaSettings, 'brokers' | 'clientId'> & Partial<Pick<KafkaSettings, 'ssl' | 'sasl'>>,
  logger?: TransportLogger,
  retries = DEFAULT_KAFKA_RETRIES,
  socketFactory?: ISocketFactory,
): Kafka {
  process.env['KAFKAJS_NO_PARTITIONER_WARNING'] ??= '1';
  const ssl = tlsOptions(settings.ssl ?? false);
  const sasl = settings.sasl;
  return new Kafka({
    clientId: settings.clientId,
    brokers: settings.brokers,
    ...(ssl === undefined ? {} : { ssl }),
    ...(sasl === undefined ? {} : { sasl: { mechanism: sasl.mechanism, username: sasl.username, password: sasl.password } as SASLOptions }),
    logLevel: logger === undefined ? logLevel.NOTHING : logLevel.WARN,
    logCreator: kafkaLogCreator(logger),
    retry: { retries, initialRetryTime: 100, maxRetryTime: 5_000 },
    ...(socketFactory === undefined ? {} : { socketFactory }),
  });
}

/** kafkajs TLS options from the settings; the PEM files are read here, so a bad path fails at start-up naming the field. */
export function tlsOptions(ssl: KafkaSettings['ssl']): boolean | ConnectionOptions | undefined {
  if (ssl === false) return undefined;
  if (ssl === true) return true;
  const read = (field: 'caFile' | 'certFile' | 'keyFile', path: string | undefined): Buffer | undefined => {
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (cause) {
      throw new FleetError('INVALID_CONFIG', `transport.kafka.ssl.${field}: cannot read ${path} (${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message})`, {
        cause,
        details: { field: `transport.kafka.ssl.${field}` },
      });
    }
  };
  const ca = read('caFile', ssl.caFile);
  const cert = read('certFile', ssl.certFile);
  const key = read('keyFile', ssl.keyFile);
  return {
    rejectUnauthorized: ssl.rejectUnauthorized,
    ...(ca === undefined ? {} : { ca: [ca] }),
    ...(cert === undefined ? {} : { cert }),
    ...(key === undefined ? {} : { key }),
  };
}

export interface EnsureTopicsOptions {
  /**
   * Lists the cluster's topics first and asks to create only the missing ones (default true): the
   * way when most exist (start-up). False: asks to create them all at once and takes the broker's
   * TOPIC_ALREADY_EXISTS for those that exist, saving a listing of every topic of the cluster (a
   * metadata request that grows with it) per call, the way for topics that are new nearly always
   * (reply topics on first use).
   */
  readonly listFirst?: boolean;
  /** Waits until the metadata names a leader for each created topic (default true). */
  readonly waitForLeaders?: boolean;
}

/**
 * Creates missing topics (existing ones are left as they are). Results and DLQ records must not
 * depend on the broker's auto-create setting, and request topics need enough partitions for the
 * workers of a group to share them.
 */
export async function ensureTopics(admin: Admin, topics: readonly string[], numPartitions: number, options: EnsureTopicsOptions = {}): Promise<void> {
  return retryTopicCreation(() => ensureTopicsOnce(admin, topics, numPartitions, options));
}

/**
 * The waits between tries while a freshly made topic is unknown to the broker asked (21.2 s in
 * all). A single KRaft broker applies its controller's records behind the CreateTopics answer, and
 * with thousands of topics on a busy machine that lag was seen to pass 6 s.
 */
export const TOPIC_LAG_WAITS_MS: readonly number[] = [200, 400, 800, 1600, 3200, 5000, 5000, 5000];

/** The waits for any other retriable failure of a creation (6.2 s in all). */
const RETRIABLE_WAITS_MS: readonly number[] = TOPIC_LAG_WAITS_MS.slice(0, 5);

/**
 * `create` again, with backoff, while it fails with a FleetError whose cause kafkajs calls
 * retriable. A freshly created topic's metadata can lag on a busy KRaft controller: kafkajs's wait
 * for its leaders then fails with "does not host this topic-partition" although the topic was made
 * (asked again, the broker answers TOPIC_ALREADY_EXISTS); that lag gets TOPIC_LAG_WAITS_MS.
 */
export async function retryTopicCreation<T>(create: () => Promise<T>, sleep: (ms: number) => Promise<void> = defaultSleep): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await create();
    } catch (err) {
      const cause = (err as FleetError).cause as { retriable?: boolean } | undefined;
      const waits = isUnknownTopic(cause) ? TOPIC_LAG_WAITS_MS : RETRIABLE_WAITS_MS;
      const wait = waits[attempt];
      if (wait === undefined || cause?.retriable !== true) throw err;
      await sleep(wait);
    }
  }
}

/**
 * `work` again, waiting TOPIC_LAG_WAITS_MS, while it fails with UNKNOWN_TOPIC_OR_PARTITION. A
 * topic ensureTopics has just made can still be unknown to the broker kafkajs asks next (its
 * metadata lags the controller's): a consumer's subscribe then fails outright and the worker would
 * not start, though asked a moment later the broker knows the topic.
 */
export async function whileTopicMetadataLags<T>(work: () => Promise<T>, sleep: (ms: number) => Promise<void> = defaultSleep): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await work();
    } catch (err) {
      const wait = TOPIC_LAG_WAITS_MS[attempt];
      if (wait === undefined || !isUnknownTopic(err)) throw err;
      await sleep(wait);
    }
  }
}

const defaultSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function ensureTopicsOnce(admin: Admin, topics: readonly string[], numPartitions: number, options: EnsureTopicsOptions): Promise<void> {
  const wanted = [...new Set(topics)];
  if (wanted.length === 0) return;
  try {
    const existing = options.listFirst === false ? new Set<string>() : new Set(await admin.listTopics());
    const missing: ITopicConfig[] = wanted.filter((t) => !existing.has(t)).map((topic) => ({ topic, numPartitions }));
    if (missing.length === 0) return;
    await admin.createTopics({ topics: missing, waitForLeaders: options.waitForLeaders ?? true });
  } catch (err) {
    // A concurrent creator wins the race; anything else is a real failure.
    if ((err as { type?: string }).type === 'TOPIC_ALREADY_EXISTS') return;
    const nested = (err as { errors?: Array<{ type?: string }> }).errors;
    if (Array.isArray(nested) && nested.every((e) => e.type === 'TOPIC_ALREADY_EXISTS')) return;
    const refused = Array.isArray(nested) ? nested.filter((e) => e.type !== 'TOPIC_ALREADY_EXISTS') : [err as { type?: string }];
    // A client without CREATE is refused for a topic that exists too (the authorizer answers
    // first): asked the listing's way, those that exist are fine and only the missing ones fail.
    if (options.listFirst === false && refused.some((e) => e.type === 'TOPIC_AUTHORIZATION_FAILED' || e.type === 'CLUSTER_AUTHORIZATION_FAILED')) {
      return ensureTopicsOnce(admin, topics, numPartitions, { ...options, listFirst: true });
    }
    // The broker refused the name or this client for good (a name colliding with an existing
    // topic, no CREATE permission, a creation policy): retrying the same creation cannot help, and
    // a retriable error would hold every result settled with a bad replyTo for ever.
    const permanent = refused.length > 0 && refused.every((e) => e.type !== undefined && REFUSED_FOR_GOOD.has(e.type));
    const why = Array.isArray(nested)
      ? nested.map((e) => `${(e as { topic?: string }).topic ?? '?'}: ${(e as { message?: string }).message ?? e.type ?? 'refused'}`).join('; ')
      : (err as Error).message;
    throw new FleetError('TRANSPORT_ERROR', `creating Kafka topics ${wanted.join(', ')} failed: ${why}`, {
      cause: err,
      retriable: !permanent,
      details: permanent ? { kafkaError: refused[0]?.type } : {},
    });
  }
}

/** CreateTopics answers that the same request would get again (see ensureTopicsOnce). */
const REFUSED_FOR_GOOD = new Set([
  'INVALID_TOPIC_EXCEPTION',
  'TOPIC_AUTHORIZATION_FAILED',
  'CLUSTER_AUTHORIZATION_FAILED',
  'POLICY_VIOLATION',
  'INVALID_PARTITIONS',
  'INVALID_REPLICATION_FACTOR',
  'INVALID_CONFIG',
]);

const TOO_LARGE = new Set(['MESSAGE_TOO_LARGE', 'RECORD_LIST_TOO_LARGE']);

const PERMANENT = new Set([
  'INVALID_TOPIC_EXCEPTION',
  'TOPIC_AUTHORIZATION_FAILED',
  'CLUSTER_AUTHORIZATION_FAILED',
  'GROUP_AUTHORIZATION_FAILED',
  'TRANSACTIONAL_ID_AUTHORIZATION_FAILED',
  ...TOO_LARGE,
  'INVALID_RECORD',
]);

/** Whether an error in `err`'s cause chain (kafkajs retriers and FleetError wrap the real one) matches. */
type ErrorLike = { name?: string; message?: string; code?: string; type?: string; cause?: unknown };

/** `err` and its causes, outermost first (at most 5: kafkajs retriers and FleetError wrap the real one). */
function causeChain(err: unknown): ErrorLike[] {
  const chain: ErrorLike[] = [];
  for (let e = err as ErrorLike | undefined; typeof e === 'object' && e !== null && chain.length < 5; e = e.cause as ErrorLike | undefined) chain.push(e);
  return chain;
}

function findCause(err: unknown, match: (e: ErrorLike) => boolean): boolean {
  return causeChain(err).some(match);
}

/** kafkajs's error type for a topic the broker does not have, anywhere in the cause chain. */
export function isUnknownTopic(err: unknown): boolean {
  return findCause(err, (e) => e.type === 'UNKNOWN_TOPIC_OR_PARTITION');
}

/**
 * Whether a transaction may have failed on a topic the broker does not have: the broker answers
 * AddPartitionsToTxn with UNKNOWN_TOPIC_OR_PARTITION for that topic's partitions and
 * OPERATION_NOT_ATTEMPTED for the others, and kafkajs throws the first of them in the broker's
 * order (a hash order of the names), so a deleted inbox often shows as the latter.
 */
export function mayBeUnknownTopic(err: unknown): boolean {
  return findCause(err, (e) => e.type === 'UNKNOWN_TOPIC_OR_PARTITION' || e.type === 'OPERATION_NOT_ATTEMPTED');
}

const TLS_FAILURE = /certificate|self[- ]signed|SSL routines|wrong version number|TLS connection|ERR_TLS|CERT_|UNABLE_TO_VERIFY/i;

/**
 * `what`, plus the setting to check when the cause is one a user fixes in the config: no broker
 * answered (transport.kafka.brokers), the SASL login was refused (transport.kafka.sasl) or TLS
 * failed (transport.kafka.ssl).
 */
export function startFailure(
  what: string,
  err: unknown,
  settings: Pick<KafkaSettings, 'brokers'> & Partial<Pick<KafkaSettings, 'ssl' | 'sasl'>>,
): string {
  if (findCause(err, (e) => e.name === 'KafkaJSSASLAuthenticationError')) {
    const sasl = settings.sasl;
    return `${what}: the brokers refused the SASL login of transport.kafka.sasl (${sasl === undefined ? 'none set' : `mechanism ${sasl.mechanism}, username ${sasl.username}`}); check the username, password and mechanism`;
  }
  if (findCause(err, (e) => TLS_FAILURE.test(`${e.code ?? ''} ${e.message ?? ''}`))) {
    return `${what}: TLS to the brokers failed; check transport.kafka.ssl (caFile for a private CA, certFile/keyFile for mutual TLS) and that the brokers' listener speaks TLS`;
  }
  if (findCause(err, (e) => e.name === 'KafkaJSConnectionError' || /ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH/.test(e.message ?? ''))) {
    return `${what}: no broker of transport.kafka.brokers (${settings.brokers.join(', ')}) answered; check the list and that the brokers are up and reachable from here`;
  }
  return what;
}

/**
 * Maps kafkajs failures to FleetError. Broker trouble (retries exhausted, leader moves, timeouts)
 * is retriable: the same publish may succeed later. Authorization / size / naming errors are not.
 */
export function kafkaError(err: unknown, what: string): FleetError {
  if (err instanceof FleetError) return err;
  const type = (err as { type?: string }).type ?? (err as { cause?: { type?: string } }).cause?.type;
  return new FleetError('TRANSPORT_ERROR', `${what}: ${(err as Error)?.message ?? String(err)}`, {
    cause: err,
    retriable: !(type !== undefined && PERMANENT.has(type)),
    // `limit: 'message-size'` is the transport-neutral mark the runtime reacts to (a result too
    // big for the broker is answered with a small failed result instead).
    details: type === undefined ? {} : { kafkaError: type, ...(TOO_LARGE.has(type) ? { limit: 'message-size' } : {}) },
  });
}

/**
 * The error for a consumer kafkajs gave up on (a CRASH event without restart: the broker refused
 * it for good), naming the setting to fix where there is one. Not retriable: the same consumer
 * would be refused again; a worker restarted with a fixed config (or fixed ACLs) is the way out.
 */
export function consumerFailure(err: unknown, settings: Pick<KafkaSettings, 'groupId' | 'sessionTimeoutMs' | 'sasl'>): FleetError {
  const user = settings.sasl === undefined ? '' : ` (user ${settings.sasl.username})`;
  const fail = (code: 'INVALID_CONFIG' | 'TRANSPORT_ERROR', field: string, message: string): FleetError =>
    new FleetError(code, message, { cause: err, retriable: false, details: { field } });
  if (findCause(err, (e) => e.type === 'INVALID_SESSION_TIMEOUT')) {
    return fail(
      'INVALID_CONFIG',
      'transport.kafka.sessionTimeoutMs',
      `the brokers refused transport.kafka.sessionTimeoutMs (${settings.sessionTimeoutMs} ms): it must lie within their group.min.session.timeout.ms and group.max.session.timeout.ms (Kafka's defaults: 6000 and 1800000)`,
    );
  }
  if (findCause(err, (e) => e.type === 'GROUP_AUTHORIZATION_FAILED')) {
    return fail(
      'TRANSPORT_ERROR',
      'transport.kafka.groupId',
      `the brokers do not let this client${user} use consumer group transport.kafka.groupId (${settings.groupId}); grant it READ on the group, or set a group it may use`,
    );
  }
  if (findCause(err, (e) => e.type === 'TOPIC_AUTHORIZATION_FAILED')) {
    return fail(
      'TRANSPORT_ERROR',
      'transport.kafka.topicTemplate',
      `the brokers do not let this client${user} read the request topics (transport.kafka.topicTemplate); grant it READ and DESCRIBE on them`,
    );
  }
  // kafkajs wraps the broker's answer (retriers, non-retriable wrappers): report the answer.
  const root = causeChain(err).at(-1);
  return fail('TRANSPORT_ERROR', 'transport.kafka', `the kafka consumer stopped and kafkajs will not restart it: ${root?.message ?? String(err)}`);
}
