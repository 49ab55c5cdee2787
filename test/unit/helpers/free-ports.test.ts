import { describe, expect, it } from 'vitest';
import { freePorts } from '../../helpers/service-process.ts';

describe('freePorts', () => {
  it('never hands out one port twice in a call (a broker given one port for two listeners fails to start)', async () => {
    for (let round = 0; round < 50; round++) {
      const ports = await freePorts(4);
      expect(ports).toHaveLength(4);
      expect(new Set(ports).size).toBe(4);
      for (const p of ports) expect(p).toBeGreaterThan(0);
    }
  });
});
