/**
 * Each device thread is named npu-dev<N> (top -H, perf, /proc/PID/task/<tid>/comm, and the
 * per-thread CPU lines of bench/pipeline-transport-bench.ts), and the name goes with the thread
 * when the device closes. Threads the simulator creates from it inherit the name, so the test
 * counts distinct names right after opening, before any execute starts a stream thread.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';

process.env['NPU_FLEET_DEVICE'] = 'sim';

import { openDevice, type Device } from '../../src/device/index.ts';

function deviceThreadNames(): string[] {
  const names: string[] = [];
  for (const tid of readdirSync('/proc/self/task')) {
    let comm: string;
    try {
      comm = readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
    } catch {
      continue; // the thread ended meanwhile
    }
    if (comm.startsWith('npu-dev')) names.push(comm);
  }
  return names.sort();
}

describe('the device thread', () => {
  const opened: Device[] = [];
  afterEach(async () => {
    for (const d of opened.splice(0)) if (!d.closed) await d.close();
  });

  it('is named after its device', async () => {
    opened.push(await openDevice(1), await openDevice(0));
    expect(deviceThreadNames()).toEqual(['npu-dev0', 'npu-dev1']);
  });

  it('is gone once the device is closed', async () => {
    const device = await openDevice(0);
    expect(deviceThreadNames()).toEqual(['npu-dev0']);
    await device.close();
    expect(deviceThreadNames()).toEqual([]);
  });
});
