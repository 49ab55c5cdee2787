/** src/device/validate.ts: load options that would size a buffer past any real one are refused in TS. */
import { describe, expect, it } from 'vitest';

import { FleetError } from '../../../src/errors/fleet-error.ts';
import { validateLoadOptions } from '../../../src/device/validate.ts';

describe('validateLoadOptions', () => {
  it('refuses max dims whose element count is not a safe integer (it would wrap in size_t)', () => {
    for (const [option, dims] of [
      ['maxInputDims', [2 ** 32, 2 ** 32]],
      ['maxOutputDims', [2 ** 27, 2 ** 27]],
    ] as const) {
      let error: unknown;
      try {
        validateLoadOptions('/m.om', { [option]: { x: [...dims] } });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(FleetError);
      expect((error as FleetError).code).toBe('INVALID_ARGUMENT');
      expect((error as FleetError).message).toContain(`${option}.x`);
    }
    expect(validateLoadOptions('/m.om', { maxInputDims: { x: [32, 2 ** 20] } }).maxInputDims).toEqual({ x: [32, 2 ** 20] });
  });
});
