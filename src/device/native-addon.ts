import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { FleetError } from '../errors/fleet-error.ts';

/**
 * The raw surface of build/<config>/npu_fleet.node (native/src/binding.cc). Nothing outside
 * src/device sees these types; device.ts wraps them with validation and FleetError mapping.
 */
export interface RawTensorInfo {
  name: string;
  dtype: number;
  dims: number[];
  maxDims: number[];
  bufferBytes: number;
}

export interface RawModelInfo {
  inputs: RawTensorInfo[];
  outputs: RawTensorInfo[];
  gears: number[];
  dynamic: 'batch' | 'range' | 'static';
  deviceMemoryBytes: number;
  slots: number;
  modelId: number;
}

export interface RawExecuteResult {
  outputs: Array<{ data: Buffer; dims: number[] }>;
  timings: { copyInMs: number; executeMs: number; copyOutMs: number; totalMs: number };
  overran: boolean;
}

export interface RawModel {
  readonly info: RawModelInfo;
  execute(inputs: Array<{ data: Uint8Array; dims: number[] }>, gear: number, timeoutMs: number): Promise<RawExecuteResult>;
  unload(): Promise<void>;
}

export interface RawDevice {
  readonly id: number;
  loadModel(
    path: string,
    gears: number[],
    maxInputDims: Record<string, number[]>,
    slots: number,
    maxOutputDims: Record<string, number[]>,
  ): Promise<RawModel>;
  memInfo(): Promise<{ freeBytes: number; totalBytes: number }>;
  close(): Promise<void>;
}

export interface RawAddon {
  backendInfo(): { kind: 'sim' | 'ascend'; libraryPath: string; deviceCount: number };
  openDevice(id: number): Promise<RawDevice>;
  aclErrorName(code: number): string;
  /** null unless running under LeakSanitizer; then 0 = no leaks, 1 = leaks reported on stderr. */
  leakCheck(): number | null;
  /** Exit code for a forced exit when a device is still busy at process exit. */
  setExitCode(code: number): void;
  /**
   * Main thread, process 'exit' only: stops every open device and finalizes ACL before C exit()
   * runs static destructors; ends the process with _exit (and the code) if a device is hung.
   */
  shutdownForExit(): void;
  /** Device threads still running, process-wide. */
  liveDevices(): number;
  addonDir: string;
}

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Where the addon is looked for, in order. NPU_FLEET_ADDON (a file path) comes first when set. */
export function addonCandidates(env: NodeJS.ProcessEnv = process.env): string[] {
  const explicit = env['NPU_FLEET_ADDON'];
  return [
    ...(explicit ? [resolve(explicit)] : []),
    resolve(REPO_ROOT, 'build', 'Release', 'npu_fleet.node'),
    resolve(REPO_ROOT, 'build', 'Debug', 'npu_fleet.node'),
  ];
}

let cached: RawAddon | undefined;

/**
 * Loads the addon once (the only place in npu-fleet that does). Loading has no side effects:
 * the ACL library is opened on the first backendInfo()/openDevice() call.
 */
export function loadAddon(): RawAddon {
  cached ??= loadAddonFrom(addonCandidates());
  return cached;
}

/** Tries each path in order; one NATIVE_LOAD_FAILED error lists every attempt and the fix. */
export function loadAddonFrom(candidates: readonly string[]): RawAddon {
  const require = createRequire(import.meta.url);
  const tried: string[] = [];
  for (const path of candidates) {
    if (!existsSync(path)) {
      tried.push(`${path}: not found`);
      continue;
    }
    try {
      return require(path) as RawAddon;
    } catch (error) {
      tried.push(`${path}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  throw new FleetError(
    'NATIVE_LOAD_FAILED',
    `the npu-fleet native addon could not be loaded. Tried:\n  ${tried.join('\n  ')}\n` +
      'Fix: run `npm run build:native` (needs a C++17 compiler, make and python3; no network), ' +
      'or set NPU_FLEET_ADDON to the path of a built npu_fleet.node.',
    { details: { tried } },
  );
}
