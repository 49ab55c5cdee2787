// A throwaway single-node KRaft Apache Kafka broker (combined broker+controller) run from the jars
// that scripts/fetch-kafka.sh caches, with settings that make a one-node cluster start fast.
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePorts, logTail, startServiceProcess, waitUntil } from './service-process.ts';
import { kafkaReady, warmUpKafka } from './kafka-probe.ts';
import { makeTestTls } from './test-tls.ts';

/** The test brokers' SASL/PLAIN login (a second listener next to PLAINTEXT; tests only). */
export const TEST_SASL = { username: 'fleet', password: 'fleet-secret' } as const;

/**
 * Broker settings (name → value) for a listener named SASL (protocol SASL_PLAINTEXT) that takes
 * TEST_SASL. The name has no '_', so the container path can pass them as KAFKA_* variables.
 */
export function saslListenerSettings(): Record<string, string> {
  return {
    'sasl.enabled.mechanisms': 'PLAIN',
    'listener.name.sasl.plain.sasl.jaas.config': `org.apache.kafka.common.security.plain.PlainLoginModule required username="${TEST_SASL.username}" password="${TEST_SASL.password}" user_${TEST_SASL.username}="${TEST_SASL.password}";`,
  };
}

/** Broker settings for a listener named TLS (protocol SSL) serving `keystoreLocation` (a PEM keystore). */
export function tlsListenerSettings(keystoreLocation: string): Record<string, string> {
  return { 'listener.name.tls.ssl.keystore.type': 'PEM', 'listener.name.tls.ssl.keystore.location': keystoreLocation };
}

export interface LocalKafka {
  readonly brokers: string[];
  /** The same broker behind SASL/PLAIN (TEST_SASL). */
  readonly saslBrokers: string[];
  /** The same broker behind TLS, its certificate signed by `tlsCaFile`. */
  readonly tlsBrokers: string[];
  readonly tlsCaFile: string;
  readonly version: string;
  readonly startupMs: number;
  /** Where the start-up time went, e.g. "format 0.8 s, broker 2.0 s, warm-up 0.4 s". */
  readonly phases: string;
  /** The broker JVM (outage drills pause it with SIGSTOP). */
  readonly pid: number | undefined;
  /**
   * Stops the broker and starts it again on the same ports and data with `settings` added to its
   * server.properties (drills of a broker whose config changed under running clients).
   */
  restart(settings: Record<string, string>): Promise<void>;
  stop(): Promise<void>;
}

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const FETCH_SCRIPT = join(REPO_ROOT, 'scripts/fetch-kafka.sh');
const READY_TIMEOUT_MS = 60_000;
// Startup speed matters more than peak throughput for a test broker on a 2-core machine.
const JVM_OPTS = [
  '-Xms256m',
  '-Xmx768m',
  '-XX:+UseSerialGC',
  '-XX:TieredStopAtLevel=1',
  '-Xshare:auto',
  '-Djava.awt.headless=true',
];

export function kafkaVersion(): string {
  if (process.env['KAFKA_VERSION']) return process.env['KAFKA_VERSION'];
  const pom = readFileSync(join(REPO_ROOT, 'scripts/kafka/pom.xml'), 'utf8');
  const match = /<kafka\.version>([^<]+)<\/kafka\.version>/.exec(pom);
  if (!match?.[1]) throw new Error('scripts/kafka/pom.xml has no <kafka.version>');
  return match[1];
}

function checkJava(): string {
  const result = spawnSync('java', ['-version'], { encoding: 'utf8' });
  if (result.error || result.status !== 0) {
    throw new Error('java is not on PATH: install Java 17+ (apt-get install openjdk-17-jre-headless) or set KAFKA_BROKERS');
  }
  const text = `${result.stderr}${result.stdout}`;
  const major = Number(/version "(\d+)/.exec(text)?.[1] ?? '0');
  if (major < 17) throw new Error(`Kafka 4 needs Java 17+, found: ${text.split('\n')[0] ?? text}`);
  return text.split('\n')[0] ?? '';
}

/** Returns the libs dir, fetching the jars first (once) when they are not cached yet. */
function ensureJars(version: string): string {
  const dest = join(REPO_ROOT, '.cache/kafka', version);
  if (existsSync(join(dest, '.complete'))) return join(dest, 'libs');
  console.log(`[services] Kafka ${version} jars not cached yet: running scripts/fetch-kafka.sh (once) ...`);
  const out = execFileSync('bash', [FETCH_SCRIPT], {
    encoding: 'utf8',
    env: { ...process.env, KAFKA_VERSION: version },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const libs = out.trim().split('\n').pop() ?? '';
  if (!existsSync(libs)) throw new Error(`scripts/fetch-kafka.sh did not produce a libs dir (said: ${out})`);
  return libs;
}

function serverProperties(dataDir: string, ports: { port: number; controllerPort: number; saslPort: number; tlsPort: number }, keystore: string): string {
  const { port, controllerPort, saslPort, tlsPort } = ports;
  return [
    'process.roles=broker,controller',
    'node.id=1',
    `controller.quorum.voters=1@127.0.0.1:${controllerPort}`,
    `listeners=PLAINTEXT://127.0.0.1:${port},SASL://127.0.0.1:${saslPort},TLS://127.0.0.1:${tlsPort},CONTROLLER://127.0.0.1:${controllerPort}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${port},SASL://127.0.0.1:${saslPort},TLS://127.0.0.1:${tlsPort}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,TLS:SSL,CONTROLLER:PLAINTEXT',
    ...Object.entries({ ...saslListenerSettings(), ...tlsListenerSettings(keystore) }).map(([k, v]) => `${k}=${v}`),
    `log.dirs=${dataDir}`,
    'num.partitions=1',
    'default.replication.factor=1',
    'min.insync.replicas=1',
    'auto.create.topics.enable=true',
    'offsets.topic.replication.factor=1',
    // One partition each: the warm-up then loads every group's and transaction's coordinator.
    'offsets.topic.num.partitions=1',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    'transaction.state.log.num.partitions=1',
    'share.coordinator.state.topic.replication.factor=1',
    'share.coordinator.state.topic.min.isr=1',
    'group.initial.rebalance.delay.ms=0',
    'log.retention.ms=600000',
    'log.segment.bytes=16777216',
    'log.flush.interval.messages=9223372036854775807',
    'num.io.threads=2',
    'num.network.threads=2',
    'num.recovery.threads.per.data.dir=1',
    'delete.topic.enable=true',
    '',
  ].join('\n');
}

const LOG4J2_PROPERTIES = [
  'status = warn',
  'appender.out.type = Console',
  'appender.out.name = OUT',
  'appender.out.layout.type = PatternLayout',
  'appender.out.layout.pattern = [%d] %p %m (%c)%n',
  'rootLogger.level = info',
  'rootLogger.appenderRef.out.ref = OUT',
  // These log every config value and every partition change at INFO: noise in a tail.
  'logger.config.name = org.apache.kafka.common.config.AbstractConfig',
  'logger.config.level = warn',
  'logger.state.name = state.change.logger',
  'logger.state.level = warn',
  '',
].join('\n');

/**
 * A random cluster id (a Kafka Uuid: base64url of 16 bytes). One starting with '-' would be read
 * by StorageTool as an option ("format -t -S5ec...": 1 start in 64 failed); Kafka's own
 * Uuid.randomUuid() redraws those too.
 */
export function clusterId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (!id.startsWith('-')) return id;
  }
}

export async function startLocalKafka(workDir: string): Promise<LocalKafka> {
  const startedAt = Date.now();
  const version = kafkaVersion();
  checkJava();
  const libs = ensureJars(version);
  const classpath = `${libs}/*`;
  const log4j = join(workDir, 'log4j2.properties');
  writeFileSync(log4j, LOG4J2_PROPERTIES);
  const jvm = [...JVM_OPTS, `-Dlog4j2.configurationFile=${log4j}`, '-cp', classpath];

  let lastError: unknown;
  for (let attempt = 1; attempt <= 2; attempt++) {
    const [port = 0, controllerPort = 0, saslPort = 0, tlsPort = 0] = await freePorts(4);
    const nodeDir = join(workDir, `kafka-${port}`);
    const dataDir = join(nodeDir, 'data');
    mkdirSync(dataDir, { recursive: true });
    const props = join(nodeDir, 'server.properties');
    const tls = makeTestTls(join(nodeDir, 'tls'), ['127.0.0.1', 'localhost']);
    writeFileSync(props, serverProperties(dataDir, { port, controllerPort, saslPort, tlsPort }, tls.keystoreFile));
    const logPath = join(nodeDir, 'broker.log');

    const formatAt = Date.now();
    // Async, so a redis-server starting alongside is not held up by this JVM run.
    await promisify(execFile)('java', [...jvm, 'kafka.tools.StorageTool', 'format', '-t', clusterId(), '-c', props], {
      encoding: 'utf8',
      timeout: 60_000,
    }).catch((error: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`kafka storage format failed: ${error.message}\n${error.stdout ?? ''}\n${error.stderr ?? ''}`);
    });

    const launchAt = Date.now();
    const proc = startServiceProcess('kafka', 'java', [...jvm, 'kafka.Kafka', props], { cwd: nodeDir, logPath });
    const brokers = [`127.0.0.1:${port}`];
    try {
      await waitUntil(`kafka ${version} broker on port ${port}`, proc, () => kafkaReady(brokers), READY_TIMEOUT_MS);
      const readyAt = Date.now();
      await warmUpKafka(brokers);
      const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
      const phases = `format ${s(launchAt - formatAt)}, broker ${s(readyAt - launchAt)}, warm-up ${s(Date.now() - readyAt)}`;
      let current = proc;
      return {
        brokers,
        saslBrokers: [`127.0.0.1:${saslPort}`],
        tlsBrokers: [`127.0.0.1:${tlsPort}`],
        tlsCaFile: tls.caFile,
        version,
        startupMs: Date.now() - startedAt,
        phases,
        get pid() {
          return current.child.pid;
        },
        restart: async (settings) => {
          await current.stop(10_000);
          appendFileSync(props, Object.entries(settings).map(([k, v]) => `${k}=${v}\n`).join(''));
          current = startServiceProcess('kafka', 'java', [...jvm, 'kafka.Kafka', props], { cwd: nodeDir, logPath });
          await waitUntil(`kafka ${version} broker on port ${port} (restarted)`, current, () => kafkaReady(brokers), READY_TIMEOUT_MS);
        },
        stop: () => current.stop(10_000),
      };
    } catch (error) {
      lastError = error;
      await proc.stop(1_000);
      // A port taken between freePort() and bind is worth one retry; anything else is not.
      if (!/Address already in use/.test(logTail(logPath, 200))) break;
    }
  }
  throw lastError instanceof Error ? lastError : new Error(String(lastError));
}
