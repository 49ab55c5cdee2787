import { describe, expect, it } from 'vitest';
import { PeriodicSweep } from '../../../src/transport/bullmq/periodic-sweep.ts';

describe('PeriodicSweep', () => {
  it('runs one sweep at a time (a second ask joins the first), sweeps on its timer, and stop() waits for the sweep in progress', async () => {
    let runs = 0;
    let release: () => void = () => undefined;
    const p = new PeriodicSweep(async () => {
      runs++;
      await new Promise<void>((r) => (release = r));
      return runs;
    });
    const a = p.sweep();
    const b = p.sweep();
    expect(a).toBe(b);
    release();
    expect(await a).toBe(1);
    p.start(20, true);
    expect(runs).toBe(2);
    release();
    await new Promise((r) => setTimeout(r, 60));
    expect(runs).toBeGreaterThanOrEqual(3);
    let stopped = false;
    const stopping = p.stop().then(() => (stopped = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(stopped).toBe(false); // a sweep is still running
    release();
    await stopping;
    const after = runs;
    await new Promise((r) => setTimeout(r, 60));
    expect(runs).toBe(after);
  });

  it('an interval of 0 never sweeps', async () => {
    let runs = 0;
    const p = new PeriodicSweep(() => Promise.resolve(++runs));
    p.start(0, true);
    await new Promise((r) => setTimeout(r, 30));
    expect(runs).toBe(0);
  });
});
