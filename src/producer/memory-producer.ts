import { decodeResult, encodeRequest, type WireEncoding } from '../codec/index.ts';
import { DEFAULT_LIMITS, type CodecLimits } from '../contracts/limits.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { sharedMemoryBroker, type MemoryBroker, type MemoryConsumer, type MemoryMessage } from '../transport/memory/memory-broker.ts';
import { CONTENT_TYPES, HEADERS, MEMORY_NAMES, renderName } from '../transport/names.ts';
import type {
  Producer,
  ProducerOptions,
  PublishOptions,
  RawMessage,
  ReplySubscription,
  RequestOptions,
  SubscribeOptions,
} from './producer.ts';
import { privateInbox } from './private-inbox.ts';
import { refuseAll, ReplyRouter } from './reply-router.ts';
import { checkReplyName, checkRequests } from './request-check.ts';
import { refuseUnservedModels, unservedRefusal } from './served-models.ts';

export interface MemoryProducerOptions extends ProducerOptions {
  readonly broker?: MemoryBroker;
}

export class MemoryProducer implements Producer {
  readonly kind = 'memory' as const;
  readonly broker: MemoryBroker;
  readonly inbox: string;
  /** Why request() cannot use the inbox (a clientId the transport cannot name it with). */
  private readonly inboxRefusal: FleetError | undefined;
  private readonly router = new ReplyRouter((model) => `that a worker in this process subscribes to ${renderName(MEMORY_NAMES.requests, model)} on the producer's memory broker`);
  private readonly subscriptions = new Set<MemoryConsumer>();
  private inboxConsumer: MemoryConsumer | undefined;
  private readonly defaultPriority: number;
  private readonly encoding: WireEncoding;
  private readonly limits: CodecLimits;
  private closed = false;
  private readonly models: readonly string[] | undefined;

  constructor(options: MemoryProducerOptions = {}) {
    this.models = options.models;
    this.broker = options.broker ?? sharedMemoryBroker();
    this.defaultPriority = options.defaultPriority ?? 0;
    this.encoding = options.encoding ?? 'binary';
    this.limits = options.limits ?? DEFAULT_LIMITS;
    const inbox = privateInbox('memory', options.clientId ?? 'producer');
    this.inbox = inbox.name;
    this.inboxRefusal = inbox.refusal;
  }

  async publish(requests: RequestEnvelope | readonly RequestEnvelope[], options: PublishOptions = {}): Promise<void> {
    this.checkOpen();
    const list: readonly RequestEnvelope[] = Array.isArray(requests) ? requests : [requests as RequestEnvelope];
    checkRequests(list, 'memory', this.limits);
    refuseUnservedModels(list, this.models);
    const encoding = options.encoding ?? this.encoding;
    const byModel = new Map<string, RequestEnvelope[]>();
    for (const r of list) {
      const group = byModel.get(r.model) ?? [];
      group.push(r);
      byModel.set(r.model, group);
    }
    for (const [model, group] of byModel) {
      this.broker.send(
        renderName(MEMORY_NAMES.requests, model),
        group.map((r) => ({
          body: encodeRequest(r, encoding),
          priority: r.priority ?? this.defaultPriority,
          key: r.streamKey ?? r.id,
          headers: { [HEADERS.contentType]: encoding === 'binary' ? CONTENT_TYPES.requestFrame : CONTENT_TYPES.requestJson },
        })),
      );
    }
  }

  async publishRaw(messages: readonly RawMessage[]): Promise<void> {
    this.checkOpen();
    for (const m of messages) {
      const body = m.body instanceof Uint8Array ? m.body : Buffer.from(JSON.stringify(m.body), 'utf8');
      this.broker.send(renderName(MEMORY_NAMES.requests, m.model), [{ body, priority: m.priority ?? this.defaultPriority, key: m.key }]);
    }
  }

  async request(request: RequestEnvelope, options: RequestOptions): Promise<ResultEnvelope> {
    if (this.inboxRefusal !== undefined) throw this.inboxRefusal;
    this.openInbox();
    return this.router.roundTrip(request.id, options.timeoutMs, () => this.publish({ ...request, replyTo: this.inbox }, options), options.timeoutMs, request.model);
  }

  requestMany(requests: readonly RequestEnvelope[], options: RequestOptions): Array<Promise<ResultEnvelope>> {
    const refusal = this.inboxRefusal;
    if (refusal !== undefined) return refuseAll(requests.length, refusal);
    const unserved = unservedRefusal(requests, this.models);
    if (unserved !== undefined) return refuseAll(requests.length, unserved);
    return this.router.roundTripMany(
      requests.map((r) => r.id),
      options.timeoutMs,
      async (waiting) => {
        this.openInbox();
        const due = requests.filter((_, i) => waiting(i));
        await this.publish(due.map((r) => ({ ...r, replyTo: this.inbox })), options);
        options.onPublished?.(due.length);
      },
      requests.map((r) => r.model),
    );
  }

  async prepare(): Promise<void> {
    if (this.inboxRefusal !== undefined) throw this.inboxRefusal;
    this.openInbox();
  }

  private openInbox(): void {
    this.checkOpen();
    this.inboxConsumer ??= this.broker.consume(this.inbox, (msgs) => this.route(msgs, (r) => this.router.deliver(r)), { autoAck: true });
  }

  async subscribeReplies(
    replyTo: string,
    onResult: (result: ResultEnvelope) => void,
    options: SubscribeOptions = {},
  ): Promise<ReplySubscription> {
    checkReplyName('memory', replyTo);
    this.checkOpen();
    const consumer = this.broker.consume(replyTo, (msgs) => this.route(msgs, onResult, options.onError), { autoAck: true });
    this.subscriptions.add(consumer);
    return {
      close: async () => {
        consumer.close();
        this.subscriptions.delete(consumer);
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.router.failAll(new FleetError('CLOSED', 'producer closed before the reply arrived'));
    this.inboxConsumer?.close();
    for (const c of this.subscriptions) c.close();
    this.subscriptions.clear();
  }

  private route(messages: MemoryMessage[], onResult: (r: ResultEnvelope) => void, onError?: (e: Error) => void): void {
    for (const m of messages) {
      let result: ResultEnvelope;
      try {
        result = decodeResult(m.body, this.limits);
      } catch (err) {
        onError?.(err as Error);
        continue;
      }
      onResult(result);
    }
  }

  private checkOpen(): void {
    if (this.closed) throw new FleetError('CLOSED', 'memory producer is closed');
  }
}
