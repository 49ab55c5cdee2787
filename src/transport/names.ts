import { FleetError } from '../errors/fleet-error.ts';

/**
 * Topic / queue naming shared by transports and producers. Templates come from the fleet config
 * (`{model}.requests.p{priority}`, `{model}.replies`, `{model}.dlq`); both sides must render them
 * the same way or requests go where no worker listens.
 */
export function renderName(template: string, model: string, priority?: number): string {
  let out = template.split('{model}').join(model);
  if (out.includes('{priority}')) {
    if (priority === undefined) {
      throw new FleetError('INVALID_CONFIG', `template "${template}" needs a priority but none was given`, {
        details: { template },
      });
    }
    out = out.split('{priority}').join(String(priority));
  }
  return out;
}

export interface SourceName {
  readonly name: string;
  readonly model: string;
  readonly priority: number | undefined;
}

/**
 * Every request topic of the given models: one per priority when the template has `{priority}`,
 * else one per model. Returned as a lookup so a consumer maps a topic back to (model, priority)
 * without parsing names (model names may contain dots).
 */
export function requestSources(
  template: string,
  subscriptions: ReadonlyArray<{ model: string; priorityLevels: number }>,
): Map<string, SourceName> {
  const out = new Map<string, SourceName>();
  for (const { model, priorityLevels } of subscriptions) {
    if (!template.includes('{priority}')) {
      const name = renderName(template, model);
      out.set(name, { name, model, priority: undefined });
      continue;
    }
    for (let p = 0; p < priorityLevels; p++) {
      const name = renderName(template, model, p);
      out.set(name, { name, model, priority: p });
    }
  }
  return out;
}

/** Kafka's rule for topic names ("." and ".." are refused by the broker too). */
const KAFKA_TOPIC = /^(?!\.{1,2}$)[A-Za-z0-9._-]{1,249}$/;
/** The memory broker takes Kafka-like names. */
const MEMORY_QUEUE = /^[A-Za-z0-9._-]{1,249}$/;

/** transport.kafka.replyTopicPattern, compiled to match whole names. */
export interface ReplyTopicPattern {
  readonly source: string;
  readonly regex: RegExp;
}

export function replyTopicPattern(source: string | undefined): ReplyTopicPattern | undefined {
  return source === undefined ? undefined : { source, regex: new RegExp(`^(?:${source})$`) };
}

/**
 * Why `name` cannot be a reply destination on this transport, or undefined when it can. One rule
 * for the worker (such a result goes to the DLQ instead) and the producers (such a request is
 * refused before it is sent: its result could never reach anyone).
 */
export function replyToProblem(kind: 'kafka' | 'bullmq' | 'memory', name: string, allowed?: ReplyTopicPattern): string | undefined {
  switch (kind) {
    case 'kafka':
      if (!KAFKA_TOPIC.test(name)) return `"${name.slice(0, 260)}" is not a legal Kafka topic name ([A-Za-z0-9._-], 1..249 chars, not "." or "..")`;
      return allowed === undefined || allowed.regex.test(name)
        ? undefined
        : `"${name.slice(0, 260)}" does not match transport.kafka.replyTopicPattern ${allowed.source} (the reply topics this fleet creates)`;
    case 'bullmq':
      return name.length > 0 && name.length <= 249 && !name.includes(':')
        ? undefined
        : `"${name.slice(0, 260)}" is not a legal BullMQ queue name (1..249 chars, no ':')`;
    case 'memory':
      return MEMORY_QUEUE.test(name) ? undefined : `"${name.slice(0, 260)}" is not a legal memory queue name ([A-Za-z0-9._-], 1..249 chars)`;
  }
}

/** `<clientId>.inbox.<uuid>`: the private inbox of a producer's request()s (see privateInbox). */
export function privateInboxName(clientId: string, uuid: string): string {
  return `${clientId}.inbox.${uuid}`;
}

const PRIVATE_INBOX = /\.inbox\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Whether `name` has the shape of a request() client's private inbox. Such a topic is made by its
 * client before the first request names it and deleted when the client closes, so a Kafka worker
 * never creates one: missing, it is gone for good (see ReplyTopics).
 */
export function isPrivateInbox(name: string): boolean {
  return PRIVATE_INBOX.test(name);
}

/** Memory transport names (it has no settings): the same shapes as the broker defaults. */
export const MEMORY_NAMES = {
  requests: '{model}.requests',
  replies: '{model}.replies',
  dlq: '{model}.dlq',
} as const;

/** Kafka headers written by npu-fleet. */
export const HEADERS = {
  contentType: 'content-type',
  requestId: 'npu-fleet-id',
  dlqReason: 'npu-fleet-dlq-reason',
  dlqMessage: 'npu-fleet-dlq-message',
  dlqSource: 'npu-fleet-dlq-source',
  /** On a DLQ record the broker refused with the original bytes: their size, and where they are. */
  dlqValueDropped: 'npu-fleet-dlq-value-dropped',
  /** Memory DLQ: the original's priority lane (Kafka has it in the topic, BullMQ in the record). */
  dlqPriority: 'npu-fleet-dlq-priority',
  /**
   * On a result in `{model}.replies` whose request named as replyTo a request() client's inbox that
   * was gone (the client closed first): that inbox, and why the result is here.
   */
  replyToGone: 'npu-fleet-reply-to-gone',
  /** On a message re-sent by DLQ replay: the DLQ record it came from. */
  replayOf: 'npu-fleet-replay-of',
} as const;

export const CONTENT_TYPES = {
  requestFrame: 'application/vnd.npu-fleet.request+frame',
  requestJson: 'application/vnd.npu-fleet.request+json',
  resultFrame: 'application/vnd.npu-fleet.result+frame',
  resultJson: 'application/vnd.npu-fleet.result+json',
} as const;

/** Priority helpers: requests name 0 as most urgent. */
export function clampPriority(priority: number | undefined, fallback: number, levels?: number): number {
  const p = priority ?? fallback;
  if (levels !== undefined && p >= levels) return levels - 1;
  return p;
}
