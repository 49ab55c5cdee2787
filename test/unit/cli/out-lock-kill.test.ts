import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { OutLock } from '../../../src/cli/out-lock.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const TAKER = join(dirname(fileURLToPath(import.meta.url)), 'fixtures/out-lock-taker.ts');
const dir = tempDir('npu-fleet-out-lock-kill-');

/** The steps of OutLock.take, in order: making a lock where none is, then taking over a stale one. */
const STEPS = [
  ['lock-written', 'none'],
  ['lock-linked', 'none'],
  ['marker-written', 'stale'],
  ['marker-linked', 'stale'],
  ['takeover-marked', 'stale'],
  ['takeover-written', 'stale'],
  ['takeover-renamed', 'stale'],
] as const;

/** Runs a taker of `out` that stops at `step`, and kills it there with SIGKILL. */
async function killedAt(out: string, step: string): Promise<void> {
  const child = spawn(process.execPath, ['--import', 'tsx', TAKER, out], {
    env: { ...process.env, NPU_FLEET_TEST_OUT_LOCK_STOP_AT: step },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const exited = once(child, 'exit');
  let said = '';
  await new Promise<void>((resolve, reject) => {
    const onData = (d: Buffer): void => {
      said += d.toString();
      if (said.includes(`stopped at ${step}`)) resolve();
      if (said.includes('won ')) reject(new Error(`the taker took the lock without passing step ${step}`));
    };
    child.stderr.on('data', onData);
    child.stdout.on('data', onData);
    child.once('exit', (code) => reject(new Error(`the taker ended (${code}) before stopping at ${step}: ${said}`)));
  }).catch((err: unknown) => {
    child.kill('SIGKILL');
    throw err;
  });
  child.kill('SIGKILL');
  const [, signal] = (await exited) as [number | null, NodeJS.Signals | null];
  expect(signal).toBe('SIGKILL');
}

const leftOf = (name: string): string[] => readdirSync(dir).filter((f) => f.startsWith(name)).sort();

describe('OutLock: a run killed at any step of taking the lock (publish --out)', () => {
  // A crash or kill -9 can land between any two of take()'s file operations. The next run must
  // proceed (the dead run's pid is gone from this host) without anyone removing files by hand.
  it('the next run takes the lock without manual clean-up, and nothing of the killed run is left once it ends', { timeout: 120_000 }, async () => {
    const deadPid = spawnSync(process.execPath, ['-e', '0']).pid ?? 0;
    expect(deadPid).toBeGreaterThan(0);
    const seen: Array<{ step: string; leftByKill: string[]; next: string; leftAfter: string[] }> = [];
    for (const [step, before] of STEPS) {
      const name = `${step}.jsonl`;
      const out = join(dir, name);
      // A lock left by a run of this host that died: taken over at once.
      if (before === 'stale') writeFileSync(`${out}.lock`, `${JSON.stringify({ pid: deadPid, host: hostname() })}\n`);
      try {
        await killedAt(out, step);
      } catch (err) {
        seen.push({ step, leftByKill: [], next: (err as Error).message, leftAfter: [] });
        continue;
      }
      const leftByKill = leftOf(name).map((f) => f.replace(/\.\d+\.[0-9a-f]{12}\.tmp$/, '.PID.RANDOM.tmp').replace(/takeover-\d+-\d+/, 'takeover-GEN'));
      let next: string;
      try {
        OutLock.take(out).release();
        next = 'taken';
      } catch (err) {
        next = (err as Error).message;
      }
      seen.push({ step, leftByKill, next, leftAfter: leftOf(name) });
    }
    console.log(`out-lock killed at each step:\n${seen.map((s) => `  ${s.step}: left ${JSON.stringify(s.leftByKill)}; next run: ${s.next}; left after it: ${JSON.stringify(s.leftAfter)}`).join('\n')}`);
    expect(seen.map(({ step, next, leftAfter }) => ({ step, next, leftAfter }))).toEqual(STEPS.map(([step]) => ({ step, next: 'taken', leftAfter: [] })));
  });
});
