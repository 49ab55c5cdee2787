/**
 * vitest setup for test/native under `npm run test:asan`: after each test file, asks
 * LeakSanitizer (through the addon) whether anything became unreachable without being freed.
 * Without a sanitizer build leakCheck() returns null and this does nothing.
 */
import { afterAll, expect } from 'vitest';

afterAll(async () => {
  if (process.env['NPU_FLEET_ASAN'] !== '1') return;
  const { loadAddon } = await import('../../../src/device/native-addon.ts');
  const leaked = loadAddon().leakCheck();
  expect(leaked, 'LeakSanitizer reported leaks (see its report on stderr)').toBe(0);
});
