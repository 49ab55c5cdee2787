import type { WireEncoding } from '../codec/index.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';

/**
 * The producer side of the fleet, one implementation per transport (created by createProducer).
 * Routing follows the workers' templates: Kafka topic `{model}.requests.p{priority}` with key
 * `streamKey ?? id`; BullMQ queue per model with native priority and `jobId = id`; memory queue
 * `{model}.requests` with a priority lane.
 */
export interface Producer {
  readonly kind: 'kafka' | 'bullmq' | 'memory';
  /** Publishes one or many requests; resolves once the broker has them durably. */
  publish(requests: RequestEnvelope | readonly RequestEnvelope[], options?: PublishOptions): Promise<void>;
  /**
   * Publishes raw bodies as they are (tests, fault injection, malformed-input drills): bytes for
   * Kafka/memory, a JSON object (job data) or bytes (sent as their UTF-8 text) for BullMQ.
   */
  publishRaw(messages: readonly RawMessage[]): Promise<void>;
  /**
   * Request and await the reply: the request's `replyTo` is replaced by this producer's private
   * inbox, the reply is correlated by `id`. Rejects with FleetError TIMEOUT after `timeoutMs`.
   */
  request(request: RequestEnvelope, options: RequestOptions): Promise<ResultEnvelope>;
  /**
   * request() for many at once (bulk scoring): one publish for all of them, one reply promise
   * each, in order; each rejects on its own (TIMEOUT, CLOSED, a repeated id, a failed publish).
   */
  requestMany(requests: readonly RequestEnvelope[], options: RequestOptions): Array<Promise<ResultEnvelope>>;
  /**
   * Connects and opens the private inbox of request()/requestMany() now (Kafka: its topic created,
   * its consumer group joined and the inbox partition assigned; BullMQ: its reply worker started),
   * so a request sent next waits on none of it. Optional: request() opens the inbox itself. A load
   * generator calls it before it starts its clock: on Kafka the opening takes 0.5-4.6 s, which the
   * first requests spent waiting with their deadlines running. Rejects as request() would (the
   * broker not answering, a clientId that cannot name the inbox, CLOSED); a later call tries again.
   */
  prepare(): Promise<void>;
  /** Bulk use: every result arriving on `replyTo` (a topic / queue name) goes to `onResult`. */
  subscribeReplies(replyTo: string, onResult: (result: ResultEnvelope) => void, options?: SubscribeOptions): Promise<ReplySubscription>;
  /** Rejects pending requests with CLOSED, closes subscriptions and connections. */
  close(): Promise<void>;
}

export interface PublishOptions {
  /** Body encoding for Kafka and memory (BullMQ job data is always the JSON form). */
  readonly encoding?: WireEncoding;
  /**
   * BullMQ: called, once the publish has resolved, with the ids whose add BullMQ dropped because
   * an earlier job of that id is kept (answered within the last hour, or still queued): those
   * requests do not run, and their results went, or will go, to that job's replyTo. Given, each
   * publish reads its jobs back (one pipelined read). Kafka and memory write every request.
   */
  readonly onDropped?: (ids: readonly string[]) => void;
}

export interface RequestOptions extends PublishOptions {
  readonly timeoutMs: number;
  /**
   * BullMQ: an id asked before whose earlier job was answered other than `ok` (expired, rejected,
   * invalid, failed as a result) runs again instead of taking that answer (the earlier job is
   * removed first); an `ok` answer, or a job still queued or running, still answers as before.
   * `publish --file --await` sets it, so a resumed run re-runs what did not succeed. Kafka and
   * memory run every request sent anyway.
   */
  readonly rerunNotOk?: boolean;
  /**
   * BullMQ: an id asked before whose earlier job was answered, `ok` or not, runs again (the earlier
   * job is removed first); a job still queued or running still answers. `publish --file --await`
   * sets it on a run that is not a --resume: a second data set reusing the first one's ids (lines
   * numbered 1, 2, 3... in both) took the first one's answers as its own, recorded ok. Kafka and
   * memory run every request sent anyway.
   */
  readonly rerunAnswered?: boolean;
  /**
   * requestMany(): called once, with how many of its requests were sent, when the publish inside it
   * has resolved (the broker has them durably: Kafka acked the send, Redis added the jobs). Not
   * called when that publish fails or never ends (a broker gone: the replies then reject, TIMEOUT
   * or the failure), nor for requests whose wait ended before they were sent. Progress that counts
   * requests published goes by it: handing them to requestMany is no sign the broker has them.
   */
  readonly onPublished?: (count: number) => void;
}

export interface RawMessage {
  readonly model: string;
  readonly body: Uint8Array | Record<string, unknown>;
  readonly priority?: number;
  /** Kafka message key / BullMQ job id. */
  readonly key?: string;
}

export interface SubscribeOptions {
  /** Kafka: read the topic from its beginning (default false: only replies from now on). */
  readonly fromBeginning?: boolean;
  /** Kafka: consumer group of the subscription (default: a private one, every reply is seen). */
  readonly groupId?: string;
  /** A reply that cannot be decoded (default: ignored). */
  readonly onError?: (error: Error) => void;
}

export interface ReplySubscription {
  close(): Promise<void>;
}

export interface ProducerOptions {
  /** Priority for requests that carry none (the worker applies the model's default otherwise). */
  readonly defaultPriority?: number;
  /** Default body encoding (Kafka, memory). */
  readonly encoding?: WireEncoding;
  readonly limits?: CodecLimits;
  /**
   * Names this producer's private inbox (`<clientId>.inbox.<uuid>`) and its Kafka groups; request()
   * refuses one outside [A-Za-z0-9._-] or over 200 characters. Default: transport.kafka.clientId on
   * Kafka, `producer` otherwise.
   */
  readonly clientId?: string;
  /**
   * The models the fleet serves (the fleet config's `models`). Given, publish(), request() and
   * requestMany() refuse any other model before anything is sent or created (FleetError
   * UNKNOWN_MODEL, `details.field` "model", `details.index`): no Kafka topic, no BullMQ job, no
   * wait for a TIMEOUT. Not given, every model is sent (on Kafka its request topic is created if
   * missing, so requests published ahead of a model's workers wait for them), and a request() for
   * a model no worker serves times out, the TIMEOUT naming the model and how to check its workers.
   */
  readonly models?: readonly string[];
}
