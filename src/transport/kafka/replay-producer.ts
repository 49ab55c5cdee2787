import type { Kafka, Producer } from 'kafkajs';
import { FleetError } from '../../errors/fleet-error.ts';
import type { KafkaSettings } from '../../contracts/fleet-config.ts';
import { kafkaError, startFailure } from './kafka-client.ts';
import { groupByTopic, type OutgoingMessage } from './kafka-outcomes.ts';

/** Replays' transactional ids start so: the principal needs WRITE and DESCRIBE on TransactionalId resources with this prefix. */
export const REPLAY_TRANSACTIONAL_ID_PREFIX = 'npu-fleet-dlq-replay-';

/** The transactional id every replay of the DLQ topic `dlqTopic` uses (see ReplayProducer). */
export function replayTransactionalId(dlqTopic: string): string {
  return `${REPLAY_TRANSACTIONAL_ID_PREFIX}${dlqTopic}`;
}

/**
 * Broker answers to an older epoch of a transactional id. kafkajs 2.2 names code 47 but not 90
 * (PRODUCER_FENCED, which newer brokers answer some requests with): that one arrives as
 * "Unknown error code 90".
 */
const FENCED_TYPES = new Set(['INVALID_PRODUCER_EPOCH', 'PRODUCER_FENCED']);
const FENCED_MESSAGE = /Unknown error code 90\b/;

interface ErrorLike {
  readonly type?: unknown;
  readonly message?: unknown;
  readonly cause?: unknown;
}

/** The error types in `err` and its causes (kafkajs retriers and FleetError wrap the broker's answer). */
function causes(err: unknown): ErrorLike[] {
  const out: ErrorLike[] = [];
  for (let e = err; typeof e === 'object' && e !== null && out.length < 6; e = (e as ErrorLike).cause) out.push(e as ErrorLike);
  return out;
}

/** True for the error a replay throws once another replay of the same DLQ fenced it. */
export function replayTakenOver(err: unknown): boolean {
  return causes(err).some((e) => e instanceof FleetError && e.details['replayTakenOver'] === true);
}

/**
 * The transactional producer of one DLQ topic's replays. Every replay of a DLQ topic uses the same
 * transactional id, `npu-fleet-dlq-replay-<dlq topic>` (the topic, not the model: two fleets with
 * different DLQ templates on one cluster do not fence each other, and one DLQ topic always maps
 * to one id). open() initialises it, which makes the broker fence every earlier producer of that id
 * and abort its open transaction, waiting until that abort is complete; so a replay that opens
 * before it reads the markers sees every marker an earlier replay will ever commit, and that earlier
 * replay's next send or commit fails (replayTakenOver). Two replays therefore never both re-send
 * a record, and a replay that dies part way leaves only whole transactions behind.
 *
 * Brokers that cannot run transactions are refused, naming the fix, rather than replayed without
 * fencing: without it, two replays at once (two operators, a retried job) both re-send, which is
 * what the markers are for; and a re-send whose marker was not written (a crash between the two)
 * would be re-sent by the next run.
 */
export class ReplayProducer {
  readonly transactionalId: string;
  private readonly producer: Producer;

  /** `settings`: what a failed connect names (the broker list, the SASL login, TLS). */
  constructor(
    kafka: Kafka,
    dlqTopic: string,
    private readonly settings: Pick<KafkaSettings, 'brokers' | 'ssl' | 'sasl'>,
  ) {
    this.transactionalId = replayTransactionalId(dlqTopic);
    // One transaction at a time with at most one request in flight: what kafkajs transactions need.
    this.producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1, transactionalId: this.transactionalId });
  }

  /** Connects and fences every earlier replay of this DLQ topic. */
  async open(): Promise<void> {
    await this.producer.connect().catch((err: unknown) => {
      throw kafkaError(err, startFailure('connecting the replay producer failed', err, this.settings));
    });
    try {
      // The first transaction initialises the transactional id (InitProducerId: the fencing); an
      // empty one ends without a request.
      const txn = await this.producer.transaction();
      await txn.abort();
    } catch (err) {
      throw transactionsRefused(err, this.transactionalId);
    }
  }

  /** `messages` (re-sends and their markers) in one transaction: all of them become visible, or none. */
  async send(messages: readonly OutgoingMessage[]): Promise<void> {
    const txn = await this.producer.transaction();
    try {
      await txn.sendBatch({ topicMessages: groupByTopic(messages), acks: -1 });
      await txn.commit();
    } catch (err) {
      await txn.abort().catch(() => undefined);
      if (causes(err).some((e) => FENCED_TYPES.has(String(e.type)) || FENCED_MESSAGE.test(String(e.message)))) {
        throw new FleetError('TRANSPORT_ERROR', `transactional id ${this.transactionalId} was fenced by a newer replay`, {
          cause: err,
          // Running it again would fence the other one in turn.
          retriable: false,
          details: { replayTakenOver: true, transactionalId: this.transactionalId },
        });
      }
      throw err;
    }
  }

  async close(): Promise<void> {
    await this.producer.disconnect().catch(() => undefined);
  }
}

/** The error for a transactional id the brokers would not initialise, naming the setting or grant to fix where there is one. */
export function transactionsRefused(err: unknown, transactionalId: string): FleetError {
  const types = new Set(causes(err).map((e) => String(e.type)));
  const what = 'dlq replay needs Kafka transactions (a re-send and its replay marker go out together, and a second replay of the same DLQ fences the first)';
  let fix: string | undefined;
  // A coordinator that is only starting up (a broker restart) is worth another try; the others are not.
  let retriable = false;
  if (types.has('TRANSACTIONAL_ID_AUTHORIZATION_FAILED')) {
    fix = `grant this client WRITE and DESCRIBE on TransactionalId ${transactionalId} (or the prefix ${REPLAY_TRANSACTIONAL_ID_PREFIX})`;
  } else if (types.has('CLUSTER_AUTHORIZATION_FAILED')) {
    fix = 'grant this client IDEMPOTENT_WRITE on the cluster (brokers before Kafka 2.8 ask for it)';
  } else if (types.has('GROUP_COORDINATOR_NOT_AVAILABLE') || types.has('COORDINATOR_NOT_AVAILABLE') || types.has('COORDINATOR_LOAD_IN_PROGRESS')) {
    fix =
      'no transaction coordinator answered: a cluster with fewer brokers than transaction.state.log.replication.factor (default 3) cannot create __transaction_state, so set it and transaction.state.log.min.isr to at most the number of brokers and restart them (brokers that are only starting up: try again)';
    retriable = true;
  } else if (types.has('UNSUPPORTED_VERSION')) {
    fix = 'the brokers are older than Kafka 0.11 and have no transactions; upgrade them';
  }
  const error = kafkaError(err, fix === undefined ? `${what}; starting transactional id ${transactionalId} failed` : `${what}; ${fix}`);
  return new FleetError(error.code, error.message, { cause: err, retriable: fix === undefined ? error.retriable : retriable, details: { ...error.details, transactionalId } });
}
