import { describe, expect, it } from 'vitest';
import { workerDeps } from '../../../src/cli/worker-deps.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { backendInfo } from '../../../src/device/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';

describe('workerDeps', () => {
  it('refuses devices.backend ascend without CANN as a config error naming the field and the fix', () => {
    // This machine runs the simulator (the test setup builds it; no CANN here).
    expect(backendInfo().kind).toBe('sim');
    let err: unknown;
    try {
      workerDeps(parseFleetConfig({ devices: { backend: 'ascend' } }));
    } catch (e) {
      err = e;
    }
    // A config error: the CLI prints its message (exit 2), not a stack trace (exit 1).
    expect(FleetError.is(err, 'INVALID_CONFIG')).toBe(true);
    expect((err as Error).message).toMatch(/devices\.backend is "ascend".*install CANN or set NPU_FLEET_ACL_LIB/);
  });
});
