import type { Admin, ITopicConfig } from 'kafkajs';
import { TOPIC_LAG_WAITS_MS } from '../../src/transport/kafka/kafka-client.ts';

/**
 * `admin.createTopics` with its leaders awaited, riding out a busy KRaft controller's metadata lag:
 * kafkajs's wait for a new topic's leaders can fail with "This server does not host this
 * topic-partition" (retriable) although the topic was made, which failed test set-ups in loaded CI
 * runs. Asked again, the creation finds the topic there; its metadata is then read until it answers.
 * The same waits as the product's ensureTopics gives that lag (TOPIC_LAG_WAITS_MS).
 */
export async function createTopicsSettled(admin: Admin, topics: ITopicConfig[]): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await admin.createTopics({ topics, waitForLeaders: true });
      await admin.fetchTopicMetadata({ topics: topics.map((t) => t.topic) });
      return;
    } catch (err) {
      const wait = TOPIC_LAG_WAITS_MS[attempt];
      if (wait === undefined || (err as { retriable?: boolean }).retriable !== true) throw err;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}
