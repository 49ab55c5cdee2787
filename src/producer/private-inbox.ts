import { randomUUID } from 'node:crypto';
import { FleetError } from '../errors/fleet-error.ts';
import { privateInboxName, replyToProblem, type ReplyTopicPattern } from '../transport/names.ts';

export interface PrivateInbox {
  /** `<clientId>.inbox.<uuid>`: the replyTo of the producer's request()s. */
  readonly name: string;
  /** Why request() cannot use it (the clientId), or undefined. */
  readonly refusal: FleetError | undefined;
}

/**
 * A producer's private inbox. A clientId the transport cannot name a topic/queue with would fail
 * every request() at the producer's replyTo check, naming a replyTo the caller never set: such a
 * request() is refused naming clientId instead (publish(), which needs no inbox, is not).
 */
export function privateInbox(kind: 'kafka' | 'bullmq' | 'memory', clientId: string, replyPattern?: ReplyTopicPattern): PrivateInbox {
  const name = privateInboxName(clientId, randomUUID());
  const problem = replyToProblem(kind, name, replyPattern);
  return {
    name,
    refusal:
      problem === undefined
        ? undefined
        : new FleetError(
            'INVALID_ARGUMENT',
            `clientId "${clientId.slice(0, 80)}" cannot name this producer's private inbox "${clientId.slice(0, 80)}.inbox.<uuid>" ` +
              `for request(): ${problem}; ${replyPattern === undefined ? 'pick a clientId of [A-Za-z0-9._-], at most 200 characters' : 'pick a clientId the pattern admits, or widen the pattern to admit <clientId>.inbox.<uuid>'}; nothing was published`,
            { details: { field: 'clientId' } },
          ),
  };
}
