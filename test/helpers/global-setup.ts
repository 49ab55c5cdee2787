// vitest globalSetup: starts real Kafka and Redis once per test run and stops them after it.
// Per service: KAFKA_BROKERS / REDIS_URL when set; else containers when a Docker engine answers;
// else local processes (redis-server from PATH, a KRaft broker from cached Apache Kafka jars).
// NPU_FLEET_TEST_SERVICES=local|containers forces the choice for services not given by env.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { dockerEngineAnswers, startKafkaContainer, startRedisContainer } from './container-services.ts';
import { kafkaReady } from './kafka-probe.ts';
import { kafkaVersion, startLocalKafka } from './local-kafka-service.ts';
import { redisInfo, startLocalRedis } from './local-redis-service.ts';
import type { ProvidedServices } from './services.ts';

interface Started {
  endpoint: string;
  /** Kafka: a SASL/PLAIN listener taking TEST_SASL, where the run controls the broker. */
  saslEndpoint?: string;
  /** Kafka: a TLS listener and the CA of its certificate, where the run controls the broker. */
  tls?: { endpoint: string; caFile: string };
  line: string;
  stop?: () => Promise<void>;
}

const EXTERNAL_WAIT_MS = 15_000;

const WORK_DIR_PREFIX = 'npu-fleet-test-services-';

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Temp dirs of earlier runs that were killed before their teardown (named after their runner's pid). */
function sweepStaleWorkDirs(): void {
  for (const name of readdirSync(tmpdir())) {
    const pid = Number(name.startsWith(WORK_DIR_PREFIX) ? name.slice(WORK_DIR_PREFIX.length).split('-')[0] : NaN);
    if (Number.isInteger(pid) && pid > 0 && !pidAlive(pid)) rmSync(join(tmpdir(), name), { recursive: true, force: true });
  }
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

async function externalKafka(value: string): Promise<Started> {
  const brokers = value.split(',').map((b) => b.trim()).filter(Boolean);
  const deadline = Date.now() + EXTERNAL_WAIT_MS;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      if (await kafkaReady(brokers)) return { endpoint: brokers.join(','), line: `kafka external (KAFKA_BROKERS) at ${brokers.join(',')}` };
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  const reason = lastError instanceof Error ? lastError.message : 'no brokers in metadata';
  throw new Error(`KAFKA_BROKERS=${value} does not answer within ${EXTERNAL_WAIT_MS} ms: ${reason}`);
}

/** The SASL/PLAIN listener: ours, or KAFKA_SASL_BROKERS (taking TEST_SASL) next to an external broker. */
function kafkaSasl(kafka: PromiseSettledResult<Started>): string[] | null {
  const env = process.env['KAFKA_SASL_BROKERS'];
  if (env) return env.split(',').map((b) => b.trim()).filter(Boolean);
  return kafka.status === 'fulfilled' && kafka.value.saslEndpoint !== undefined ? kafka.value.saslEndpoint.split(',') : null;
}

async function externalRedis(url: string): Promise<Started> {
  const { version } = await redisInfo(url, EXTERNAL_WAIT_MS).catch((error: unknown) => {
    throw new Error(`REDIS_URL=${url} does not answer: ${error instanceof Error ? error.message : String(error)}`);
  });
  return { endpoint: url, line: `redis ${version} external (REDIS_URL) at ${url}` };
}

async function startKafka(mode: 'containers' | 'local', workDir: string): Promise<Started> {
  const version = kafkaVersion();
  if (mode === 'containers') {
    const c = await startKafkaContainer(version);
    return {
      endpoint: c.endpoint,
      ...(c.saslEndpoint === undefined ? {} : { saslEndpoint: c.saslEndpoint }),
      ...(c.tls === undefined ? {} : { tls: c.tls }),
      stop: c.stop,
      line: `kafka container ${c.image} at ${c.endpoint}, ready in ${seconds(c.startupMs)}`,
    };
  }
  const k = await startLocalKafka(workDir);
  return {
    endpoint: k.brokers.join(','),
    saslEndpoint: k.saslBrokers.join(','),
    tls: { endpoint: k.tlsBrokers.join(','), caFile: k.tlsCaFile },
    stop: k.stop,
    line: `kafka ${k.version} local KRaft broker (java, jars in .cache/kafka/${k.version}) at ${k.brokers.join(',')}, ready in ${seconds(k.startupMs)} (${k.phases})`,
  };
}

async function startRedis(mode: 'containers' | 'local', workDir: string): Promise<Started> {
  if (mode === 'containers') {
    const c = await startRedisContainer();
    return { endpoint: c.endpoint, stop: c.stop, line: `redis container ${c.image} at ${c.endpoint}, ready in ${seconds(c.startupMs)}` };
  }
  const r = await startLocalRedis(workDir);
  return { endpoint: r.url, stop: r.stop, line: `redis ${r.version} local redis-server at ${r.url}, ready in ${seconds(r.startupMs)}` };
}

async function chooseMode(): Promise<{ mode: 'containers' | 'local'; why: string }> {
  const forced = process.env['NPU_FLEET_TEST_SERVICES'];
  if (forced === 'local' || forced === 'containers') return { mode: forced, why: `NPU_FLEET_TEST_SERVICES=${forced}` };
  const docker = await dockerEngineAnswers();
  return docker.answers
    ? { mode: 'containers', why: `Docker engine answers at ${docker.how}` }
    : { mode: 'local', why: `no Docker engine (${docker.how})` };
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const startedAt = Date.now();
  const envKafka = process.env['KAFKA_BROKERS'];
  const envRedis = process.env['REDIS_URL'];
  const needMode = !envKafka || !envRedis;
  const { mode, why } = needMode ? await chooseMode() : { mode: 'local' as const, why: 'both given by env' };
  sweepStaleWorkDirs();
  const workDir = mkdtempSync(join(tmpdir(), `${WORK_DIR_PREFIX}${process.pid}-`));
  const removeWorkDir = (): void => rmSync(workDir, { recursive: true, force: true });
  process.once('exit', removeWorkDir);

  const [kafka, redis] = await Promise.allSettled([
    envKafka ? externalKafka(envKafka) : startKafka(mode, workDir),
    envRedis ? externalRedis(envRedis) : startRedis(mode, workDir),
  ]);

  const errorText = (r: PromiseSettledResult<Started>): string | null =>
    r.status === 'rejected' ? (r.reason instanceof Error ? r.reason.message : String(r.reason)) : null;
  const services: ProvidedServices = {
    kafkaBrokers: kafka.status === 'fulfilled' ? kafka.value.endpoint.split(',') : null,
    kafkaError: errorText(kafka),
    kafkaSaslBrokers: kafkaSasl(kafka),
    kafkaTls: kafka.status === 'fulfilled' && kafka.value.tls !== undefined ? { brokers: kafka.value.tls.endpoint.split(','), caFile: kafka.value.tls.caFile } : null,
    redisUrl: redis.status === 'fulfilled' ? redis.value.endpoint : null,
    redisError: errorText(redis),
    summary: [],
  };
  services.summary = [
    kafka.status === 'fulfilled' ? kafka.value.line : `kafka FAILED to start; tests that use Kafka will fail: ${services.kafkaError ?? ''}`,
    services.kafkaSaslBrokers ? `kafka SASL/PLAIN listener at ${services.kafkaSaslBrokers.join(',')}` : 'kafka SASL/PLAIN listener: none (external KAFKA_BROKERS without KAFKA_SASL_BROKERS); the SASL test will fail',
    services.kafkaTls ? `kafka TLS listener at ${services.kafkaTls.brokers.join(',')} (CA ${services.kafkaTls.caFile})` : 'kafka TLS listener: none (external KAFKA_BROKERS); the TLS test will fail',
    redis.status === 'fulfilled' ? redis.value.line : `redis FAILED to start; tests that use Redis will fail: ${services.redisError ?? ''}`,
  ];
  console.log(`[services] ${needMode ? `${mode} (${why})` : why}; total ${seconds(Date.now() - startedAt)}`);
  for (const line of services.summary) console.log(`[services] ${line}`);

  project.provide('testServices', services);
  // Also for child processes that tests spawn (workers, producers) and read the usual variables.
  const savedEnv = {
    KAFKA_BROKERS: envKafka,
    REDIS_URL: envRedis,
    KAFKAJS_NO_PARTITIONER_WARNING: process.env['KAFKAJS_NO_PARTITIONER_WARNING'],
  };
  // kafkajs 2 prints a partitioner-migration warning on every producer: noise in every Kafka test.
  process.env['KAFKAJS_NO_PARTITIONER_WARNING'] ??= '1';
  if (services.kafkaBrokers) process.env['KAFKA_BROKERS'] = services.kafkaBrokers.join(',');
  if (services.redisUrl) process.env['REDIS_URL'] = services.redisUrl;

  return async () => {
    const stops = [kafka, redis].map((r) => (r.status === 'fulfilled' && r.value.stop ? r.value.stop() : Promise.resolve()));
    const results = await Promise.allSettled(stops);
    for (const [key, value] of Object.entries(savedEnv)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
    removeWorkDir();
    process.removeListener('exit', removeWorkDir);
    for (const r of results) if (r.status === 'rejected') console.error('[services] teardown failed:', r.reason);
  };
}
