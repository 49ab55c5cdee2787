// What tests use to reach the real Kafka and Redis that test/helpers/global-setup.ts started (or
// that KAFKA_BROKERS / REDIS_URL point at). A service that could not be started makes every test
// that touches it fail with the reason; nothing is skipped.
import { inject } from 'vitest';

import { TEST_SASL } from './local-kafka-service.ts';

import { uniqueName } from './unique-name.ts';
export { uniqueName } from './unique-name.ts';

export interface TestServices {
  /** host:port list for kafkajs `brokers`. */
  readonly kafkaBrokers: string[];
  /** redis://host:port for ioredis / BullMQ. */
  readonly redisUrl: string;
  /** The Kafka broker behind SASL/PLAIN, and the login it takes. */
  readonly kafkaSasl: { readonly brokers: string[]; readonly username: string; readonly password: string };
  /** The Kafka broker behind TLS, and the CA file its certificate verifies against. */
  readonly kafkaTls: { readonly brokers: string[]; readonly caFile: string };
}

/** Serializable hand-over from the global setup (main process) to the test workers (forks). */
export interface ProvidedServices {
  kafkaBrokers: string[] | null;
  kafkaError: string | null;
  /** null: KAFKA_BROKERS names an external broker and KAFKA_SASL_BROKERS is not set. */
  kafkaSaslBrokers?: string[] | null;
  /** null: an external broker (KAFKA_BROKERS), whose listeners this run does not control. */
  kafkaTls?: { brokers: string[]; caFile: string } | null;
  redisUrl: string | null;
  redisError: string | null;
  /** One line per service: what runs and how, as printed at startup. */
  summary: string[];
}

declare module 'vitest' {
  export interface ProvidedContext {
    testServices: ProvidedServices;
  }
}

function provided(): ProvidedServices {
  let fromSetup: ProvidedServices | undefined;
  try {
    fromSetup = inject('testServices');
  } catch {
    // inject() throws outside a vitest worker
  }
  if (fromSetup) return fromSetup;
  // Without the global setup (e.g. another vitest config), fall back to externally given servers.
  const kafka = process.env['KAFKA_BROKERS'];
  const redis = process.env['REDIS_URL'];
  const noSetup = 'the vitest global setup (test/helpers/global-setup.ts) did not run';
  return {
    kafkaBrokers: kafka ? kafka.split(',').map((b) => b.trim()).filter(Boolean) : null,
    kafkaError: kafka ? null : `${noSetup} and KAFKA_BROKERS is not set`,
    kafkaSaslBrokers: process.env['KAFKA_SASL_BROKERS']?.split(',').map((b) => b.trim()).filter(Boolean) ?? null,
    redisUrl: redis ?? null,
    redisError: redis ? null : `${noSetup} and REDIS_URL is not set`,
    summary: [],
  };
}

/**
 * Connection info for the test servers. Reading a field of a service that failed to start throws
 * an Error carrying the start-up failure (broker log tail included where there was one).
 */
export function getServices(): TestServices {
  const p = provided();
  return {
    get kafkaBrokers(): string[] {
      if (!p.kafkaBrokers) throw new Error(`Kafka is not available for this test run: ${p.kafkaError ?? 'unknown reason'}`);
      return [...p.kafkaBrokers];
    },
    get kafkaSasl() {
      if (!p.kafkaSaslBrokers) {
        throw new Error(
          `Kafka with SASL is not available for this test run: ${p.kafkaError ?? 'KAFKA_BROKERS names an external broker; set KAFKA_SASL_BROKERS to a SASL/PLAIN listener that takes the login in test/helpers/local-kafka-service.ts (TEST_SASL)'}`,
        );
      }
      return { brokers: [...p.kafkaSaslBrokers], ...TEST_SASL };
    },
    get kafkaTls() {
      if (!p.kafkaTls) {
        throw new Error(`Kafka with TLS is not available for this test run: ${p.kafkaError ?? 'KAFKA_BROKERS names an external broker, whose listeners this run does not control'}`);
      }
      return { brokers: [...p.kafkaTls.brokers], caFile: p.kafkaTls.caFile };
    },
    get redisUrl(): string {
      if (!p.redisUrl) throw new Error(`Redis is not available for this test run: ${p.redisError ?? 'unknown reason'}`);
      return p.redisUrl;
    },
  };
}

/**
 * A Kafka transport section of a fleet config whose group and every topic (requests, replies, DLQ)
 * are this test's own: `<prefix><unique>.{model}...` on the test broker.
 */
export function uniqueKafkaTransport(prefix: string): { kind: 'kafka'; kafka: { brokers: string[]; groupId: string; topicTemplate: string; repliesTemplate: string; dlqTemplate: string } } {
  const tag = uniqueName(prefix).replace(/-/g, '');
  return {
    kind: 'kafka',
    kafka: {
      brokers: getServices().kafkaBrokers,
      groupId: `${tag}.g`,
      topicTemplate: `${tag}.{model}.requests.p{priority}`,
      repliesTemplate: `${tag}.{model}.replies`,
      dlqTemplate: `${tag}.{model}.dlq`,
    },
  };
}
