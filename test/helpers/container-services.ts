// Redis and Kafka in containers via testcontainers, used only when a Docker engine answers.
import { existsSync, mkdtempSync } from 'node:fs';
import { request } from 'node:http';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { kafkaReady, warmUpKafka } from './kafka-probe.ts';
import { saslListenerSettings, tlsListenerSettings } from './local-kafka-service.ts';
import { makeTestTls } from './test-tls.ts';
import { freePorts } from './service-process.ts';

export interface ContainerService {
  readonly endpoint: string;
  /** Kafka only: the same broker behind SASL/PLAIN (TEST_SASL). */
  readonly saslEndpoint?: string;
  /** Kafka only: the same broker behind TLS, and the CA that signed its certificate. */
  readonly tls?: { readonly endpoint: string; readonly caFile: string };
  readonly image: string;
  readonly startupMs: number;
  stop(): Promise<void>;
}

const PING_TIMEOUT_MS = 1_500;

function ping(target: { socketPath: string } | { host: string; port: number }): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ ...target, path: '/_ping', method: 'GET', timeout: PING_TIMEOUT_MS }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => {
      req.destroy();
      resolve(false);
    });
    req.on('error', () => resolve(false));
    req.end();
  });
}

/**
 * Whether a Docker engine answers, decided within a couple of seconds. Only unix sockets and plain
 * tcp DOCKER_HOSTs are probed directly; anything else (ssh://, TLS) is left to testcontainers.
 */
export async function dockerEngineAnswers(): Promise<{ answers: boolean; how: string }> {
  const dockerHost = process.env['DOCKER_HOST'];
  if (dockerHost) {
    const url = new URL(dockerHost);
    if (url.protocol === 'unix:') {
      return { answers: await ping({ socketPath: url.pathname }), how: dockerHost };
    }
    if (url.protocol === 'tcp:' && process.env['DOCKER_TLS_VERIFY'] !== '1') {
      return { answers: await ping({ host: url.hostname, port: Number(url.port || 2375) }), how: dockerHost };
    }
    return { answers: await testcontainersRuntimeAnswers(), how: dockerHost };
  }
  const runtimeDir = process.env['XDG_RUNTIME_DIR'];
  const sockets = [
    '/var/run/docker.sock',
    join(homedir(), '.docker/run/docker.sock'),
    join(homedir(), '.docker/desktop/docker.sock'),
    ...(runtimeDir ? [join(runtimeDir, 'docker.sock'), join(runtimeDir, 'podman/podman.sock')] : []),
  ];
  for (const socketPath of sockets) {
    if (existsSync(socketPath) && (await ping({ socketPath }))) return { answers: true, how: socketPath };
  }
  return { answers: false, how: `no DOCKER_HOST and no answering socket among ${sockets.join(', ')}` };
}

async function testcontainersRuntimeAnswers(): Promise<boolean> {
  const { getContainerRuntimeClient } = await import('testcontainers');
  const timeout = new Promise<false>((resolve) => setTimeout(() => resolve(false), 5_000).unref());
  return await Promise.race([getContainerRuntimeClient().then(() => true, () => false), timeout]);
}

export async function startRedisContainer(): Promise<ContainerService> {
  const startedAt = Date.now();
  const { GenericContainer, Wait } = await import('testcontainers');
  const image = process.env['TEST_REDIS_IMAGE'] ?? 'redis:7-alpine';
  const container = await new GenericContainer(image)
    .withExposedPorts(6379)
    .withCommand(['redis-server', '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction'])
    .withWaitStrategy(Wait.forLogMessage('Ready to accept connections'))
    .start();
  return {
    endpoint: `redis://${container.getHost()}:${container.getMappedPort(6379)}`,
    image,
    startupMs: Date.now() - startedAt,
    stop: async () => {
      await container.stop();
    },
  };
}

export async function startKafkaContainer(version: string): Promise<ContainerService> {
  const startedAt = Date.now();
  const { GenericContainer, Wait, getContainerRuntimeClient } = await import('testcontainers');
  const image = process.env['TEST_KAFKA_IMAGE'] ?? `apache/kafka:${version}`;
  const host = (await getContainerRuntimeClient()).info.containerRuntime.host;
  // The broker must advertise the address clients dial, which is only known up front with a fixed binding.
  const [port = 0, saslPort = 0, tlsPort = 0] = await freePorts(3);
  const tls = makeTestTls(mkdtempSync(join(tmpdir(), 'npu-fleet-kafka-tls-')), [host, 'localhost', '127.0.0.1']);
  const keystoreInContainer = '/opt/kafka/config/npu-fleet-test-keystore.pem';
  // The image turns KAFKA_A_B into a.b; these listeners' names (SASL, TLS) have no '_'.
  const listenerEnv = Object.fromEntries(
    Object.entries({ ...saslListenerSettings(), ...tlsListenerSettings(keystoreInContainer) }).map(([k, v]) => [`KAFKA_${k.toUpperCase().replace(/\./g, '_')}`, v]),
  );
  const container = await new GenericContainer(image)
    .withExposedPorts({ container: port, host: port }, { container: saslPort, host: saslPort }, { container: tlsPort, host: tlsPort })
    .withCopyContentToContainer([{ content: tls.keystorePem, target: keystoreInContainer, mode: 0o644 }])
    .withEnvironment({
      ...listenerEnv,
      KAFKA_NODE_ID: '1',
      KAFKA_PROCESS_ROLES: 'broker,controller',
      KAFKA_LISTENERS: `PLAINTEXT://0.0.0.0:${port},SASL://0.0.0.0:${saslPort},TLS://0.0.0.0:${tlsPort},CONTROLLER://127.0.0.1:9093`,
      KAFKA_ADVERTISED_LISTENERS: `PLAINTEXT://${host}:${port},SASL://${host}:${saslPort},TLS://${host}:${tlsPort}`,
      KAFKA_CONTROLLER_LISTENER_NAMES: 'CONTROLLER',
      KAFKA_INTER_BROKER_LISTENER_NAME: 'PLAINTEXT',
      KAFKA_LISTENER_SECURITY_PROTOCOL_MAP: 'CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,TLS:SSL',
      KAFKA_CONTROLLER_QUORUM_VOTERS: '1@127.0.0.1:9093',
      KAFKA_NUM_PARTITIONS: '1',
      KAFKA_AUTO_CREATE_TOPICS_ENABLE: 'true',
      KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR: '1',
      KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS: '1',
      KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR: '1',
      KAFKA_TRANSACTION_STATE_LOG_MIN_ISR: '1',
      KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS: '1',
      KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR: '1',
      KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR: '1',
      KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS: '0',
      KAFKA_LOG_RETENTION_MS: '600000',
    })
    .withWaitStrategy(Wait.forLogMessage(/Kafka Server started/))
    .withStartupTimeout(120_000)
    .start();
  const brokers = [`${host}:${port}`];
  try {
    const deadline = Date.now() + 30_000;
    while (!(await kafkaReady(brokers).catch(() => false))) {
      if (Date.now() > deadline) throw new Error(`kafka container ${image} at ${brokers[0] ?? ''} does not answer metadata`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await warmUpKafka(brokers);
  } catch (error) {
    await container.stop().catch(() => undefined);
    throw error;
  }
  return {
    endpoint: brokers.join(','),
    saslEndpoint: `${host}:${saslPort}`,
    tls: { endpoint: `${host}:${tlsPort}`, caFile: tls.caFile },
    image,
    startupMs: Date.now() - startedAt,
    stop: async () => {
      await container.stop();
    },
  };
}
