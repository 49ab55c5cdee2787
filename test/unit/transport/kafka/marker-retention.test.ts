import { describe, expect, it } from 'vitest';
import { alterCommand, MARKER_RETENTION_MARGIN_MS, markerRetentionMs, markerTopicConfigs } from '../../../../src/transport/kafka/marker-retention.ts';

const DAY_MS = 86_400_000;

describe('markerRetentionMs: markers stay until the DLQ can no longer hold their records', () => {
  it("a DLQ deleting by time: its retention.ms plus its segment.ms (a record lives until its segment's newest one expires) plus a day", () => {
    expect(MARKER_RETENTION_MARGIN_MS).toBe(DAY_MS);
    expect(markerRetentionMs({ cleanupPolicy: 'delete', retentionMs: 7 * DAY_MS, segmentMs: 7 * DAY_MS })).toBe(15 * DAY_MS);
    expect(markerRetentionMs({ cleanupPolicy: 'compact,delete', retentionMs: 3 * DAY_MS, segmentMs: DAY_MS })).toBe(5 * DAY_MS);
    expect(markerRetentionMs({ cleanupPolicy: 'delete', retentionMs: 0, segmentMs: 60_000 })).toBe(DAY_MS + 60_000);
  });

  it('a DLQ that keeps records forever (retention.ms=-1, compaction only, or a time beyond exact numbers) keeps markers forever: -1', () => {
    expect(markerRetentionMs({ cleanupPolicy: 'delete', retentionMs: -1, segmentMs: DAY_MS })).toBe(-1);
    expect(markerRetentionMs({ cleanupPolicy: 'compact', retentionMs: 7 * DAY_MS, segmentMs: DAY_MS })).toBe(-1);
    expect(markerRetentionMs({ cleanupPolicy: 'delete', retentionMs: Number('9223372036854775807'), segmentMs: DAY_MS })).toBe(-1);
  });

  it('the marker topic is compacted and deleted by time only (a broker default retention.bytes would delete markers of records still there)', () => {
    expect(markerTopicConfigs(5 * DAY_MS)).toEqual({ 'cleanup.policy': 'compact,delete', 'retention.ms': String(5 * DAY_MS), 'retention.bytes': '-1' });
  });

  it('the fix command puts list values in brackets, as kafka-configs.sh takes them', () => {
    expect(alterCommand('b1:9092', 'fleet.m.dlq.replayed', markerTopicConfigs(-1))).toBe(
      "kafka-configs.sh --bootstrap-server b1:9092 --alter --entity-type topics --entity-name fleet.m.dlq.replayed --add-config 'cleanup.policy=[compact,delete],retention.ms=-1,retention.bytes=-1'",
    );
  });
});
