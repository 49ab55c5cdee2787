import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../../src/cli/main.ts';

let stderr: string[] = [];
beforeEach(() => {
  stderr = [];
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (stderr.push(String(chunk)), true));
});
afterEach(() => vi.restoreAllMocks());

describe('npu-fleet start flags', () => {
  it('--devices past the most a fleet takes exits 2 naming the flag, not a config key the user never wrote', async () => {
    expect(await main(['start', '--devices', '65'])).toBe(2);
    expect(stderr.join('')).toBe('npu-fleet: --devices must be an integer from 1 to 64, got "65"\n');
  });
});
