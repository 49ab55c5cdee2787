import { describe, expect, it } from 'vitest';
import { parseFleetConfig } from '../../../src/contracts/index.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';

const kafka = (kafkaSettings: Record<string, unknown>) => parseFleetConfig({ transport: { kind: 'kafka', kafka: { brokers: ['a:9092'], ...kafkaSettings } } });
const bullmq = (bullmqSettings: Record<string, unknown>) => parseFleetConfig({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://r:6379', ...bullmqSettings } } });

// A request topic/queue or DLQ template without {model} gives every model the same one. Measured
// on a real broker and worker before this check (Kafka and BullMQ), requests were still served by
// the model they named, but a worker serving one of two models rejected the other's requests
// (UNKNOWN_MODEL) and dead-lettered them, pausing one model's intake paused the other's and not
// its own, and `dlq list --model` listed both models' letters. Per-model topics:
// test/integration/transport/name-templates.test.ts.
describe('name templates without {model}', () => {
  it.each([
    ['transport.kafka.topicTemplate', () => kafka({ topicTemplate: 'requests.p{priority}' }), 'e.g. {model}.requests.p{priority}'],
    ['transport.kafka.dlqTemplate', () => kafka({ dlqTemplate: 'fleet.dlq' }), 'e.g. {model}.dlq'],
    ['transport.bullmq.queueTemplate', () => bullmq({ queueTemplate: 'requests' }), 'e.g. {model}.requests'],
    ['transport.bullmq.dlqTemplate', () => bullmq({ dlqTemplate: 'fleet.dlq' }), 'e.g. {model}.dlq'],
  ])('%s is refused at load, naming the field and the fix', (field, load, example) => {
    const err = fleetErrorOf(load);
    expect(err.code).toBe('INVALID_CONFIG');
    expect(err.details.field).toBe(field);
    expect(err.message).toContain(`${field}: `);
    expect(err.message).toMatch(/no \{model\}/);
    expect(err.message).toContain(`include {model}, ${example}`);
  });

  it('a template with {model} anywhere in it is fine', () => {
    const k = kafka({ topicTemplate: 'prod-{model}-in-p{priority}', dlqTemplate: 'dead.{model}' }).transport;
    expect(k.kind === 'kafka' && [k.kafka.topicTemplate, k.kafka.dlqTemplate]).toEqual(['prod-{model}-in-p{priority}', 'dead.{model}']);
    const b = bullmq({ queueTemplate: 'in.{model}', dlqTemplate: 'dead.{model}' }).transport;
    expect(b.kind === 'bullmq' && [b.bullmq.queueTemplate, b.bullmq.dlqTemplate]).toEqual(['in.{model}', 'dead.{model}']);
  });

  it('a default reply topic/queue shared by every model stays allowed: each result names its model and id', () => {
    const k = kafka({ repliesTemplate: 'fleet.replies' }).transport;
    expect(k.kind === 'kafka' && k.kafka.repliesTemplate).toBe('fleet.replies');
    const b = bullmq({ repliesTemplate: 'fleet.replies' }).transport;
    expect(b.kind === 'bullmq' && b.bullmq.repliesTemplate).toBe('fleet.replies');
  });

  it('a Kafka request topic without {priority} stays allowed (one topic per model for all its priorities)', () => {
    const k = kafka({ topicTemplate: '{model}.requests' }).transport;
    expect(k.kind === 'kafka' && k.kafka.topicTemplate).toBe('{model}.requests');
  });
});

// Only the Kafka request topic has a priority to put in a name. Elsewhere {priority} passed the
// config and every worker then failed at start, after its device was opened and its models loaded,
// with 'template "{model}.dlq.p{priority}" needs a priority but none was given' (no field, no fix;
// real Kafka and Redis), and was restarted for good under `npu-fleet start`.
describe('name templates with {priority} where a name has no priority', () => {
  it.each([
    ['transport.kafka.repliesTemplate', () => kafka({ repliesTemplate: '{model}.replies.p{priority}' }), 'e.g. {model}.replies'],
    ['transport.kafka.dlqTemplate', () => kafka({ dlqTemplate: '{model}.dlq.p{priority}' }), 'e.g. {model}.dlq'],
    ['transport.bullmq.queueTemplate', () => bullmq({ queueTemplate: '{model}.p{priority}' }), 'e.g. {model}.requests'],
    ['transport.bullmq.repliesTemplate', () => bullmq({ repliesTemplate: '{model}.replies.p{priority}' }), 'e.g. {model}.replies'],
    ['transport.bullmq.dlqTemplate', () => bullmq({ dlqTemplate: '{model}.dlq.p{priority}' }), 'e.g. {model}.dlq'],
  ])('%s is refused at load, naming the field and the fix', (field, load, example) => {
    const err = fleetErrorOf(load);
    expect(err.code).toBe('INVALID_CONFIG');
    expect(err.details.field).toBe(field);
    expect(err.message).toContain(`${field}: has {priority}`);
    expect(err.message).toContain(`remove {priority}, ${example}`);
  });
});
