import type { Admin } from 'kafkajs';
import { MAX_PRIORITY_LEVELS } from '../contracts/request-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { kafkaError } from '../transport/kafka/kafka-client.ts';
import { renderName } from '../transport/names.ts';

/** A request topic about to be created, with what it was rendered from. */
export interface MissingRequestTopic {
  readonly topic: string;
  readonly model: string;
  readonly priority: number;
}

/**
 * Workers create their model's request topics, one per priority level, when they start. A
 * request whose priority topic is missing while the model's lower ones exist would land where no
 * worker reads and never be answered: refused here, naming the levels. (With no topic of the
 * model yet, no worker has started; its topics are created so requests wait for one. A topic such
 * a producer created is taken for a worker's below, so the message names both possibilities: told
 * apart, it would take each topic's creator, which Kafka does not record.)
 */
export async function refuseUnreadPriorities(admin: Admin, topicTemplate: string, missing: readonly MissingRequestTopic[]): Promise<void> {
  let existing: Set<string>;
  try {
    existing = new Set(await admin.listTopics());
  } catch (err) {
    throw kafkaError(err, 'listing topics failed');
  }
  for (const m of missing) {
    if (existing.has(m.topic)) continue;
    const served = [...Array(MAX_PRIORITY_LEVELS).keys()].filter((p) => existing.has(renderName(topicTemplate, m.model, p)));
    if (served.length === 0) continue;
    throw new FleetError(
      'INVALID_ARGUMENT',
      `priority ${m.priority} of model ${m.model}: no worker reads ${m.topic}; the model's topics exist for priorities ${served.join(', ')} ` +
        `(its workers create one per priorityLevels level when they start; a producer that published before any worker started creates only the one it used). ` +
        `Publish with one of those (0 is most urgent), or start the model's workers first`,
      { details: { field: 'priority', model: m.model, priority: m.priority, served } },
    );
  }
}
