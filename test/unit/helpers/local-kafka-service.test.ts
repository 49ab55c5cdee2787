import { describe, expect, it } from 'vitest';
import { clusterId } from '../../helpers/local-kafka-service.ts';

describe('local Kafka cluster id', () => {
  it('is a 22-character base64url Uuid that never starts with "-" (StorageTool would read it as an option)', () => {
    for (let i = 0; i < 20_000; i++) {
      const id = clusterId();
      expect(id).toMatch(/^[A-Za-z0-9_][A-Za-z0-9_-]{21}$/);
    }
  });
});
