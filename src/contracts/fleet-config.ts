import { z } from 'zod';
import { CodecLimitsSchema } from './limits.ts';

export const FLEET_DEFAULTS = {
  modelRepository: 'examples/models',
  deviceCount: 2,
  inflightPerDevice: 2,
  drainTimeoutMs: 30_000,
  startTimeoutMs: 600_000,
  hangLimitMs: 30_000,
  maxHangsPerRequest: 2,
  metricsPort: 9464,
  restartBackoffMinMs: 500,
  restartBackoffMaxMs: 30_000,
  topicTemplate: '{model}.requests.p{priority}',
  repliesTemplate: '{model}.replies',
  dlqTemplate: '{model}.dlq',
  bullmqPrefix: 'npu-fleet',
  bullmqQueueTemplate: '{model}.requests',
  bullmqLockDurationMs: 120_000,
  bullmqPrefetch: 256,
  bullmqConnectTimeoutMs: 15_000,
  bullmqReplyTtlMs: 86_400_000,
  bullmqDlqTtlMs: 604_800_000,
  publishLingerMs: 2,
  workerMaxSemiSpaceMb: 16,
  kafkaMaxBytesPerPartition: 256 * 1024,
  kafkaLowPriorityInflight: 128,
  kafkaTransactionTimeoutMs: 60_000,
} as const;

/**
 * The longest delay Node's setTimeout keeps (2^31 - 1 ms): it fires a longer one after 1 ms. Bounds
 * the settings that become timers as given; the worker's own bounds (drain, start, hang) wait at
 * most this long instead (runtime/timer-delay.ts), so they take any value.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A number of milliseconds that becomes a timer as given (see MAX_TIMER_MS). */
const timerMs = () =>
  z
    .number()
    .max(MAX_TIMER_MS, `longer than Node's longest timer (${MAX_TIMER_MS} ms, about 24.8 days), which fires such a delay at once`);

/** Devices one fleet config can name (devices.count; `start --devices`). */
export const MAX_DEVICES = 64;

export const KafkaSslSchema = z
  .strictObject({
    caFile: z.string().min(1).optional().describe('PEM CA bundle the broker certificates are checked against (default: the system CAs)'),
    certFile: z.string().min(1).optional().describe('PEM client certificate (mutual TLS; with keyFile)'),
    keyFile: z.string().min(1).optional().describe('PEM client private key (mutual TLS; with certFile)'),
    rejectUnauthorized: z.boolean().default(true).describe('Refuse brokers whose certificate does not verify; false only for testing'),
  })
  .refine((s) => (s.certFile === undefined) === (s.keyFile === undefined), {
    message: 'certFile and keyFile go together (mutual TLS needs both)',
    path: ['keyFile'],
  })
  .describe('TLS to the brokers');

/** A credential: an all-digit one (from YAML or an NPU_FLEET__ variable) arrives as a number, and is meant as text. */
const credential = z.preprocess((v) => (typeof v === 'number' || typeof v === 'boolean' ? String(v) : v), z.string().min(1));

export const KafkaSaslSchema = z
  .strictObject({
    mechanism: z.enum(['plain', 'scram-sha-256', 'scram-sha-512']).describe('SASL mechanism the brokers offer'),
    username: credential,
    password: credential.describe('Better from the environment: NPU_FLEET__TRANSPORT__KAFKA__SASL__PASSWORD'),
  })
  .describe('SASL authentication (use with ssl unless the network is trusted: PLAIN sends the password as is)');

function compiles(source: string): boolean {
  try {
    new RegExp(source);
    return true;
  } catch {
    return false;
  }
}

interface TemplateRules {
  /** The default, also the example in the messages. */
  readonly fallback: string;
  readonly kind: 'topic' | 'queue';
  /**
   * A request topic/queue or DLQ: one per model. Without {model} every model shares one, and a
   * worker maps each topic/queue to one model: one serving only some of the models rejects the
   * others' requests (UNKNOWN_MODEL) and dead-letters them, pausing one model's intake pauses
   * another's, and `dlq list --model` lists every model's letters.
   */
  readonly perModel: boolean;
  /**
   * Only the Kafka request topic has a priority to fill in: elsewhere {priority} made every worker
   * fail at start, after its models loaded, without naming the field.
   */
  readonly takesPriority: boolean;
}

const nameTemplate = ({ fallback, kind, perModel, takesPriority }: TemplateRules, description: string) =>
  z
    .string()
    .refine((template) => !perModel || template.includes('{model}'), {
      message: `has no {model}, so every model would share one ${kind}: include {model}, e.g. ${fallback}`,
      params: { saysFix: true },
    })
    .refine((template) => takesPriority || !template.includes('{priority}'), {
      message: `has {priority}, but only transport.kafka.topicTemplate has a priority to put there: remove {priority}, e.g. ${fallback}`,
      params: { saysFix: true },
    })
    .default(fallback)
    .describe(description);

/**
 * A bootstrap broker, host:port (a bracketed IPv6 literal as host: [::1]:9092). Without a port,
 * kafkajs retried a NaN port for good ('Port should be >= 0 and < 65536'), naming no setting.
 */
const kafkaBroker = z
  .string()
  .min(1)
  .superRefine((broker, ctx) => {
    // A bracketed IPv6 literal keeps its colons: [::1]:9092.
    const colon = broker.startsWith('[') && broker.includes(']') ? broker.indexOf(':', broker.indexOf(']')) : broker.indexOf(':');
    const host = colon < 0 ? broker : broker.slice(0, colon);
    const port = colon < 0 ? undefined : broker.slice(colon + 1);
    let why: string | undefined;
    if (host === '') why = 'no host';
    else if (port === undefined) why = 'no port';
    else if (!/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) why = `port ${port} is not a number from 1 to 65535`;
    if (why === undefined) return;
    const example = /^[A-Za-z0-9.-]+$/.test(host) ? host : 'kafka-0';
    ctx.addIssue({ code: 'custom', message: `must be host:port (got "${broker}": ${why}), e.g. ${example}:9092`, params: { saysFix: true } });
  });

export const KafkaSettingsSchema = z
  .strictObject({
    brokers: z.array(kafkaBroker).min(1).describe('Bootstrap brokers, host:port'),
    ssl: z.union([z.boolean(), KafkaSslSchema]).default(false).describe('TLS: true (system CAs) or the files to use'),
    sasl: KafkaSaslSchema.optional(),
    clientId: z.string().default('npu-fleet').describe('Kafka client id'),
    groupId: z.string().default('npu-fleet-workers').describe('Consumer group shared by all workers'),
    topicTemplate: nameTemplate({ fallback: FLEET_DEFAULTS.topicTemplate, kind: 'topic', perModel: true, takesPriority: true }, 'Request topic per model and priority; {model} and {priority} are replaced'),
    repliesTemplate: nameTemplate({ fallback: FLEET_DEFAULTS.repliesTemplate, kind: 'topic', perModel: false, takesPriority: false }, 'Default reply topic; {model} replaced'),
    dlqTemplate: nameTemplate({ fallback: FLEET_DEFAULTS.dlqTemplate, kind: 'topic', perModel: true, takesPriority: false }, 'Dead-letter topic; {model} replaced'),
    replyTopicPattern: z
      .string()
      .min(1)
      .refine((source) => compiles(source), { message: 'not a valid regular expression (JavaScript syntax); fix it or leave replyTopicPattern out' })
      .optional()
      .describe(
        'Regular expression the whole of every replyTo a request names must match (the reply topics workers create on first use): ' +
          "others get no topic, their request goes to {model}.dlq as INVALID_ARGUMENT. Unset: any legal name. Must admit the producers' private inboxes, <clientId>.inbox.<uuid>",
      ),
    exactlyOnce: z.boolean().default(false).describe('Transactional results + offsets (needs broker support)'),
    transactionTimeoutMs: timerMs()
      .int()
      .min(1_000)
      .default(FLEET_DEFAULTS.kafkaTransactionTimeoutMs)
      .describe(
        'exactlyOnce: how long a worker transaction may stay open before the coordinator aborts it (and fences the worker). A worker that dies ' +
          "mid-transaction holds read_committed readers of its reply partitions back this long. At most the brokers' transaction.max.timeout.ms (default 15 min)",
      ),
    sessionTimeoutMs: z.number().int().positive().default(30_000),
    maxBytesPerPartition: z
      .number()
      .int()
      .positive()
      .default(FLEET_DEFAULTS.kafkaMaxBytesPerPartition)
      .describe(
        'Fetch size per partition; smaller keeps a low-priority backlog from delaying urgent fetches. A worker raises it to hold ' +
          "the largest request its models allow (the broker serves a larger record batch from one partition per fetch only), up to the request topics' max.message.bytes",
      ),
    lowPriorityInflightPerPartition: z
      .number()
      .int()
      .positive()
      .default(FLEET_DEFAULTS.kafkaLowPriorityInflight)
      .describe('Unsettled deliveries per partition of a priority > 0 topic before it is paused'),
  })
  .describe('Kafka transport settings');

export const RedisTlsSchema = z
  .strictObject({
    caFile: z.string().min(1).optional().describe('PEM CA bundle the Redis server certificate is checked against (default: the system CAs)'),
    certFile: z.string().min(1).optional().describe('PEM client certificate (mutual TLS, tls-auth-clients yes; with keyFile)'),
    keyFile: z.string().min(1).optional().describe('PEM client private key (mutual TLS; with certFile)'),
    rejectUnauthorized: z.boolean().default(true).describe('Refuse a server whose certificate does not verify; false only for testing'),
  })
  .refine((s) => (s.certFile === undefined) === (s.keyFile === undefined), {
    message: 'certFile and keyFile go together (mutual TLS needs both)',
    path: ['keyFile'],
  })
  .describe('TLS to Redis: given, the connection is TLS whatever the URL scheme; rediss:// alone uses the system CAs');

export const RedisSentinelSchema = z
  .strictObject({
    name: z.string().min(1).describe('Master name the sentinels monitor (sentinel monitor <name> ...)'),
    sentinels: z
      .array(z.string().regex(/^[^\s:]+:\d+$/, 'host:port'))
      .min(1)
      .describe('Sentinels, host:port; any one that answers names the current master'),
    username: credential.optional().describe("The sentinels' own login (sentinel ACL user), when they have one"),
    password: credential.optional().describe("The sentinels' own password; better from NPU_FLEET__TRANSPORT__BULLMQ__SENTINEL__PASSWORD"),
  })
  .describe(
    'Redis Sentinel: the master is asked of the sentinels (and again after a failover); redisUrl then gives only the login, db and ' +
      'scheme of the master (its host:port are not dialled), e.g. redis://user:password@master/0',
  );

/**
 * The scheme of a Redis URL, as it may go into a message: letters, digits and +.- only (RFC 3986), so
 * it carries no part of a login; undefined when the text has none.
 */
function urlScheme(url: string): string | undefined {
  return /^([a-z][a-z0-9+.-]{0,19}):\/\//i.exec(url)?.[1];
}

/**
 * ioredis takes any other text as a host or a Unix socket path: http://127.0.0.1:6391 became the
 * socket //127.0.0.1:6391 (connect ENOENT) while the error said 'Redis at 127.0.0.1:6391 did not
 * answer', and under `start` each worker exited 1 and was restarted for good. The message names
 * the scheme only: the URL may carry the password.
 */
const redisUrl = z.string().superRefine((url, ctx) => {
  const scheme = urlScheme(url)?.toLowerCase();
  if (scheme === 'redis' || scheme === 'rediss') return;
  const got = url === '' ? 'an empty value' : scheme === undefined ? 'no scheme' : `scheme ${scheme}:`;
  ctx.addIssue({
    code: 'custom',
    message: `must be a redis:// or rediss:// URL (got ${got}); write it as redis://[user:password@]host:port[/db]`,
    params: { saysFix: true },
  });
});

export const BullmqSettingsSchema = z
  .strictObject({
    redisUrl: redisUrl.describe('redis://[user:password@]host:port[/db]; rediss:// for TLS'),
    tls: RedisTlsSchema.optional(),
    sentinel: RedisSentinelSchema.optional(),
    prefix: z
      .string()
      // BullMQ joins prefix:queue:...: an empty prefix made every key start with ':'.
      .refine((prefix) => prefix !== '', {
        message: `must not be empty (every key would start with ':'): name a prefix, or leave prefix out for the default ${FLEET_DEFAULTS.bullmqPrefix}`,
        params: { saysFix: true },
      })
      .default(FLEET_DEFAULTS.bullmqPrefix)
      .describe('BullMQ key prefix'),
    queueTemplate: nameTemplate({ fallback: FLEET_DEFAULTS.bullmqQueueTemplate, kind: 'queue', perModel: true, takesPriority: false }, 'Queue per model; {model} replaced'),
    repliesTemplate: nameTemplate({ fallback: FLEET_DEFAULTS.repliesTemplate, kind: 'queue', perModel: false, takesPriority: false }, 'Default reply queue; {model} replaced'),
    dlqTemplate: nameTemplate({ fallback: FLEET_DEFAULTS.dlqTemplate, kind: 'queue', perModel: true, takesPriority: false }, 'Dead-letter queue; {model} replaced'),
    lockDurationMs: timerMs()
      .int()
      .positive()
      .default(FLEET_DEFAULTS.bullmqLockDurationMs)
      .describe('Job lock; must cover the worst local wait plus batch time'),
    prefetch: z
      .number()
      .int()
      .positive()
      .default(FLEET_DEFAULTS.bullmqPrefetch)
      .describe(
        'Jobs a worker holds per model (BullMQ concurrency); a few device batches deep. Larger costs CPU per job ' +
          '(more jobs waiting on locks and promises) and delays priority',
      ),
    connectTimeoutMs: timerMs()
      .int()
      .positive()
      .default(FLEET_DEFAULTS.bullmqConnectTimeoutMs)
      .describe('How long a worker start or a first publish waits for Redis before failing (BullMQ alone waits forever)'),
    replyTtlMs: z
      .number()
      .int()
      .nonnegative()
      .default(FLEET_DEFAULTS.bullmqReplyTtlMs)
      .describe(
        'Results waiting longer than this in a reply queue a worker answered on (the model\'s default one or a request\'s ' +
          'own replyTo) are removed (nobody read them), like a Kafka topic\'s retention; 0 keeps them until taken',
      ),
    dlqTtlMs: z
      .number()
      .int()
      .nonnegative()
      .default(FLEET_DEFAULTS.bullmqDlqTtlMs)
      .describe('DLQ records older than this are removed; 0 keeps them'),
  })
  .describe('BullMQ transport settings');

/**
 * The section of a transport `kind` does not use may be present and is ignored: one environment
 * (e.g. docker-compose) can carry both and switch with `kind`. Any other unknown key is an error.
 */
const unusedSection = z.unknown().optional().describe('Ignored: settings of a transport this kind does not use');

export const TransportSettingsSchema = z
  .discriminatedUnion('kind', [
    z.strictObject({ kind: z.literal('memory'), kafka: unusedSection, bullmq: unusedSection }),
    z.strictObject({ kind: z.literal('kafka'), kafka: KafkaSettingsSchema, bullmq: unusedSection }),
    z.strictObject({ kind: z.literal('bullmq'), bullmq: BullmqSettingsSchema, kafka: unusedSection }),
  ])
  .describe('Where requests come from: memory (embedded), kafka or bullmq');

export const FleetConfigSchema = z
  .strictObject({
    transport: TransportSettingsSchema.default({ kind: 'memory' }),
    modelRepository: z.string().default(FLEET_DEFAULTS.modelRepository).describe('Directory of models/<name>/<version>'),
    models: z
      .array(z.string().min(1))
      .min(1, 'an empty list serves no model: list the model names, or leave models out to serve all')
      .optional()
      .describe('Serve only these models (default: all in the repository)'),
    devices: z
      .strictObject({
        count: z.number().int().positive().max(MAX_DEVICES).default(FLEET_DEFAULTS.deviceCount).describe('Devices (one worker each)'),
        backend: z.enum(['auto', 'sim', 'ascend']).default('auto').describe('ACL library: auto-detect, simulator or CANN'),
      })
      .default({ count: FLEET_DEFAULTS.deviceCount, backend: 'auto' }),
    worker: z
      .strictObject({
        inflightPerDevice: z.number().int().min(1).max(2).default(FLEET_DEFAULTS.inflightPerDevice),
        drainTimeoutMs: z.number().int().positive().default(FLEET_DEFAULTS.drainTimeoutMs).describe('SIGTERM drain bound'),
        startTimeoutMs: z
          .number()
          .int()
          .positive()
          .default(FLEET_DEFAULTS.startTimeoutMs)
          .describe(
            'Bound on a start-up (device open, model loads, broker join): past it the worker logs what it was waiting for and ' +
              'exits 72 for a restart, and /healthz turns 503 while it is still alive. A device open or a model read that never ' +
              'returns (a hung driver, a stalled mount) would otherwise leave it starting for good, /healthz 200. ' +
              'The default (10 min) is meant to cover loading the largest models on a real NPU',
          ),
        hangLimitMs: z
          .number()
          .int()
          .positive()
          .default(FLEET_DEFAULTS.hangLimitMs)
          .describe('A batch on the device longer than this makes the worker exit for restart'),
        maxHangsPerRequest: z
          .number()
          .int()
          .min(1)
          .default(FLEET_DEFAULTS.maxHangsPerRequest)
          .describe(
            'A request that was on the device during this many hangs or worker crashes is answered failed (DEVICE_HANG) and ' +
              'dead-lettered instead of run again: one poison input must not crash-loop the fleet. After the first it runs ' +
              'alone, so the requests batched with it are not blamed twice',
          ),
        publishLingerMs: timerMs().nonnegative().default(FLEET_DEFAULTS.publishLingerMs).describe('Result batching window'),
        journalDir: z
          .string()
          .default('')
          .describe(
            'Where each worker keeps the ids of its batches in flight, so that the worker started after a crash counts the ' +
              'request that was on the device as a suspect, as after a hang (default "": the OS temp dir). Keep it on a ' +
              'volume that outlives a worker restart (a Kubernetes emptyDir does)',
          ),
        metricsPort: z
          .number()
          .int()
          .min(0)
          .max(65535)
          .default(FLEET_DEFAULTS.metricsPort)
          .describe('HTTP port of /metrics for device 0; device N uses port + N (0: ephemeral)'),
        maxSemiSpaceMb: z
          .number()
          .int()
          .min(0)
          .max(256)
          .default(FLEET_DEFAULTS.workerMaxSemiSpaceMb)
          .describe(
            'V8 young-generation semi-space of worker processes, MiB (--max-semi-space-size; 0: Node default). ' +
              'Each scavenge pauses the event loop for the in-flight requests it copies, and a bigger young generation collects ' +
              'less often but finds more of them alive. Under a Kafka bulk backlog, 64 MiB paused 10-13 ms a scavenge and ' +
              'priority-0 p99 was 19-23 ms (idle 11-15), 16 MiB paused 3-6 ms and p99 was 14-19 ms. 64 MiB buys ~10% bulk throughput ' +
              '(main-thread CPU per request) for that tail and ~48 MiB more RSS per worker: a fleet serving only bulk work may set it',
          ),
      })
      .default({
        inflightPerDevice: FLEET_DEFAULTS.inflightPerDevice,
        drainTimeoutMs: FLEET_DEFAULTS.drainTimeoutMs,
        startTimeoutMs: FLEET_DEFAULTS.startTimeoutMs,
        hangLimitMs: FLEET_DEFAULTS.hangLimitMs,
        maxHangsPerRequest: FLEET_DEFAULTS.maxHangsPerRequest,
        publishLingerMs: FLEET_DEFAULTS.publishLingerMs,
        journalDir: '',
        metricsPort: FLEET_DEFAULTS.metricsPort,
        maxSemiSpaceMb: FLEET_DEFAULTS.workerMaxSemiSpaceMb,
      }),
    supervisor: z
      .strictObject({
        restartBackoffMinMs: timerMs().int().positive().default(FLEET_DEFAULTS.restartBackoffMinMs),
        restartBackoffMaxMs: timerMs().int().positive().default(FLEET_DEFAULTS.restartBackoffMaxMs),
      })
      .refine((s) => s.restartBackoffMinMs <= s.restartBackoffMaxMs, {
        message: 'restartBackoffMinMs must not exceed restartBackoffMaxMs: raise supervisor.restartBackoffMaxMs or lower supervisor.restartBackoffMinMs',
        path: ['restartBackoffMinMs'],
      })
      .default({ restartBackoffMinMs: FLEET_DEFAULTS.restartBackoffMinMs, restartBackoffMaxMs: FLEET_DEFAULTS.restartBackoffMaxMs }),
    limits: CodecLimitsSchema.default(CodecLimitsSchema.parse({})),
    log: z
      .strictObject({
        // No default here: an unset level lets the logger take $NPU_FLEET_LOG_LEVEL (else info),
        // which the Kubernetes manifest and docker-compose set.
        level: z
          .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
          .optional()
          .describe('Log level (default: $NPU_FLEET_LOG_LEVEL, else info)'),
      })
      .default({}),
    demo: z
      .strictObject({
        enabled: z.boolean().default(false).describe('Generate built-in demo load (embedded memory fleet)'),
        requestsPerSecond: z.number().positive().default(500),
      })
      .default({ enabled: false, requestsPerSecond: 500 }),
  })
  .superRefine((c, ctx) => {
    // Device N listens on metricsPort + N: the last device's worker could never start.
    const lastPort = c.worker.metricsPort + c.devices.count - 1;
    if (c.worker.metricsPort !== 0 && lastPort > 65535) {
      ctx.addIssue({
        code: 'custom',
        path: ['worker', 'metricsPort'],
        message: `device ${c.devices.count - 1} would listen on ${lastPort} (metricsPort + device): use a value <= ${65536 - c.devices.count}, or fewer devices.count`,
        params: { saysFix: true },
      });
    }
  })
  .describe('npu-fleet configuration (one YAML file plus NPU_FLEET__* env overrides)');
export type FleetConfig = z.infer<typeof FleetConfigSchema>;
export type KafkaSettings = z.infer<typeof KafkaSettingsSchema>;
export type BullmqSettings = z.infer<typeof BullmqSettingsSchema>;
export type TransportSettings = z.infer<typeof TransportSettingsSchema>;
