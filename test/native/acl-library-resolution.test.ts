/**
 * Which ACL library the addon opens when neither NPU_FLEET_ACL_LIB nor CANN's ASCEND_* variables
 * are set: a libascendcl.so on LD_LIBRARY_PATH (how a container image or a unit file often sets
 * CANN up) is the real library and must be used, not replaced by the bundled simulator. Each
 * case runs in a child process (the library is resolved once per process, and LD_LIBRARY_PATH
 * is read at process start). The "CANN library" is a copy of libacl_sim.so named libascendcl.so.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { addonCandidates } from '../../src/device/native-addon.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const ADDON = addonCandidates().find((p) => existsSync(p));
const SIM = join(dirname(ADDON ?? ''), 'libacl_sim.so');

const PROBE = `
import { backendInfo } from './src/device/index.ts';
try {
  const b = backendInfo();
  console.log(JSON.stringify({ libraryPath: b.libraryPath, deviceCount: b.deviceCount }));
} catch (e) {
  console.log(JSON.stringify({ error: e instanceof Error ? e.message : String(e) }));
}`;

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function libDir(content: 'sim' | 'broken' | 'none'): string {
  const dir = mkdtempSync(join(tmpdir(), 'npu-fleet-acl-lib-'));
  dirs.push(dir);
  if (content === 'sim') copyFileSync(SIM, join(dir, 'libascendcl.so'));
  if (content === 'broken') writeFileSync(join(dir, 'libascendcl.so'), 'not an ELF file\n');
  return dir;
}

function probe(ldLibraryPath: string): { libraryPath?: string; deviceCount?: number; error?: string } {
  const env: NodeJS.ProcessEnv = { ...process.env, LD_LIBRARY_PATH: ldLibraryPath };
  for (const k of ['NPU_FLEET_DEVICE', 'NPU_FLEET_ACL_LIB', 'ASCEND_HOME_PATH', 'ASCEND_TOOLKIT_HOME']) delete env[k];
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', PROBE], {
    cwd: ROOT,
    env,
    encoding: 'utf8',
    timeout: 60_000,
  });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as { libraryPath?: string; error?: string };
}

describe('ACL library resolution without NPU_FLEET_ACL_LIB or ASCEND_* variables', () => {
  it('uses a libascendcl.so found on LD_LIBRARY_PATH', () => {
    expect(ADDON).toBeDefined();
    const empty = libDir('none');
    const cann = libDir('sim');
    const r = probe(`${empty}::${cann}`);
    expect(r.error).toBeUndefined();
    expect(r.libraryPath).toBe(join(cann, 'libascendcl.so'));
    expect(r.deviceCount).toBeGreaterThan(0);
  });

  it('fails naming the library when the one on LD_LIBRARY_PATH cannot load, instead of falling back', () => {
    const broken = libDir('broken');
    const r = probe(broken);
    expect(r.error).toContain(join(broken, 'libascendcl.so'));
    expect(r.error).toContain('LD_LIBRARY_PATH');
  });

  it('still falls back to the bundled simulator when no libascendcl.so is anywhere', () => {
    const r = probe(libDir('none'));
    expect(r.error).toBeUndefined();
    expect(r.libraryPath).toBe(SIM);
  });
});
