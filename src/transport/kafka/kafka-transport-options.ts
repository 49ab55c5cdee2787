import type { ISocketFactory } from 'kafkajs';
import type { TransportLogger } from './kafka-client.ts';

export interface KafkaTransportOptions {
  readonly logger?: TransportLogger;
  /** Partitions of the topics this transport creates when missing (requests, replies, DLQ). */
  readonly partitions?: number;
  /** Fetch long-poll bound; also how quickly a resume or a new priority-0 message is seen. */
  readonly maxWaitTimeMs?: number;
  /** Fetch size per partition (default 1 MiB); raised to hold `largestRequestBytes` (see fetch-size.ts). */
  readonly maxBytesPerPartition?: number;
  /**
   * The largest request the worker can be sent, as its models' configs allow (undefined: not
   * known in advance). The per-partition fetch size is raised to hold it, capped at the request
   * topics' max.message.bytes; a request seen larger than the fetch size is logged once.
   */
  readonly largestRequestBytes?: number | undefined;
  /**
   * Unsettled deliveries per partition of a priority > 0 topic before that partition is paused
   * (resumed at half). Keeps a deep low-priority backlog at the source, so priority-0 fetches are
   * never queued behind it locally.
   */
  readonly lowPriorityInflightPerPartition?: number;
  /** The same bound for priority 0 (a memory bound only). */
  readonly inflightPerPartition?: number;
  /** Unique per worker process: names the transactional id in exactlyOnce mode. */
  readonly instanceId?: string;
  /** kafkajs retries per request before a publish/commit fails (default 8, ~30 s of backoff). */
  readonly retries?: number;
  /** Content-type / request-id headers on results (default off: they slow kafkajs sends a lot). */
  readonly resultHeaders?: boolean;
  /**
   * Opens every broker connection of this transport (kafkajs socketFactory; default: plain TCP or
   * TLS per the settings). A test seam: network-fault tests cut off one kind of traffic with it.
   */
  readonly socketFactory?: ISocketFactory;
}
