import { describe, expect, it } from 'vitest';
import { isUnknownTopic } from '../../../src/transport/kafka/kafka-client.ts';
import { ProducerTopics } from '../../../src/transport/kafka/producer-topics.ts';

function tracker(cluster: Set<string>, options = {}) {
  const calls = { list: 0 };
  const topics = new ProducerTopics(async () => {
    calls.list++;
    return [...cluster];
  }, options);
  return { topics, calls };
}

describe('ProducerTopics', () => {
  it('checks the cluster only when kafkajs would refresh: a new topic, the check interval, a suspect failure', async () => {
    const cluster = new Set(['a', 'b', 'c']);
    const { topics, calls } = tracker(cluster, { checkEveryMs: 60_000 });
    expect(await topics.beforeSend(['a'], 0)).toEqual({ fresh: false, gone: [] }); // knows nothing yet
    expect(calls.list).toBe(0);
    topics.record(['a']);
    expect(await topics.beforeSend(['a'], 1_000)).toEqual({ fresh: false, gone: [] });
    expect(calls.list).toBe(0);
    expect(await topics.beforeSend(['a', 'b'], 2_000)).toEqual({ fresh: false, gone: [] }); // new topic: checked
    expect(calls.list).toBe(1);
    topics.record(['b']);
    cluster.delete('a');
    expect(await topics.beforeSend(['b'], 30_000)).toEqual({ fresh: false, gone: [] }); // within the interval
    expect(calls.list).toBe(1);
    expect(await topics.beforeSend(['b'], 62_001)).toEqual({ fresh: true, gone: ['a'] });
    expect(calls.list).toBe(2);
    topics.reset();
    topics.record(['b']);
    expect(await topics.beforeSend(['b'], 62_002)).toEqual({ fresh: false, gone: [] });
    topics.markSuspect();
    cluster.delete('b');
    expect(await topics.beforeSend(['b'], 62_003)).toEqual({ fresh: true, gone: ['b'] });
    expect(calls.list).toBe(3);
  });

  it('asks for a fresh producer past the topic bound, without asking the cluster', async () => {
    const { topics, calls } = tracker(new Set(['t0', 't1', 't2']), { maxTopics: 2 });
    topics.record(['t0', 't1']);
    expect(await topics.beforeSend(['t2'], 0)).toEqual({ fresh: true, gone: [] });
    expect(calls.list).toBe(0);
    expect(topics.size).toBe(2);
  });
});

describe('isUnknownTopic', () => {
  it.each([
    [{ type: 'UNKNOWN_TOPIC_OR_PARTITION' }, true],
    [{ name: 'KafkaJSNumberOfRetriesExceeded', cause: { type: 'UNKNOWN_TOPIC_OR_PARTITION' } }, true],
    [{ code: 'TRANSPORT_ERROR', cause: { cause: { type: 'UNKNOWN_TOPIC_OR_PARTITION' } } }, true],
    [{ type: 'NOT_LEADER_FOR_PARTITION' }, false],
    [new Error('boom'), false],
    [undefined, false],
  ])('%j → %s', (err, expected) => {
    expect(isUnknownTopic(err)).toBe(expected);
  });
});
