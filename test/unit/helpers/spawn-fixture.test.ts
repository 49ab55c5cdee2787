import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fixtureProcesses, spawnFixture } from '../../helpers/spawn-fixture.ts';
import { alive } from '../../helpers/until.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const spawnTracked = fixtureProcesses();
/** The pid the last but one test left running, for the last to check. */
let leftRunning: number | undefined;

/** A fixture file running `source`, and the argument it prints back as its first line. */
function fixture(source: string): string {
  const path = join(tempDir('npu-fleet-spawn-fixture-'), 'fixture.ts');
  writeFileSync(path, `process.stdout.write(\`arg \${process.argv[2]}\\n\`);\n${source}\n`);
  return path;
}

describe('spawnFixture', () => {
  it('collects stdout lines, split across writes, and until finds the first matching one', async () => {
    // "two" arrives in two writes 100 ms apart: a line is only a line once its '\n' has come.
    const p = spawnFixture(fixture(`process.stdout.write('one\\ntw'); setTimeout(() => process.stdout.write('o\\nthree 3\\n'), 100); setTimeout(() => {}, 60_000);`), ['x y']);
    try {
      expect(await p.until(/^three \d$/, 10_000)).toBe('three 3');
      expect(p.lines).toEqual(['arg x y', 'one', 'two', 'three 3']);
      expect(await p.untilCount(/^t/, 2, 1_000)).toEqual(['two', 'three 3']);
    } finally {
      p.child.kill('SIGKILL');
    }
    expect(await p.exited).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('rejects at once, naming the exit code and the lines seen, when the process exits before the line comes', async () => {
    const p = spawnFixture(fixture(`process.stdout.write('partial'); process.exitCode = 3;`), ['a']);
    const startedAt = Date.now();
    const err = await p.until(/^never/, 30_000).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/fixture\.ts ended before 1 line\(s\) matching \/\^never\/ \(0 did\); fixture\.ts exited with code 3; 2 line\(s\): arg a \| partial$/);
    expect(Date.now() - startedAt).toBeLessThan(20_000);
  });

  it('rejects after timeoutMs, saying the process still runs, and names a signal it died of', async () => {
    const p = spawnTracked(fixture(`setTimeout(() => {}, 60_000);`), ['b']);
    await p.until(/^arg b$/, 10_000);
    await expect(p.untilCount(/^never/, 2, 300)).rejects.toThrow(/^300 ms passed before 2 line\(s\) matching \/\^never\/ \(0 did\); fixture\.ts \(pid \d+\) still running; 1 line\(s\): arg b$/);
    p.child.kill('SIGTERM');
    await expect(p.until(/^never/, 10_000)).rejects.toThrow(/exited on SIGTERM/);
  });

  it('fixtureProcesses: a process still running when its test ends is SIGKILLed', async () => {
    const p = spawnTracked(fixture(`process.on('SIGTERM', () => {}); setTimeout(() => {}, 60_000);`), ['c']);
    await p.until(/^arg c$/, 10_000);
    leftRunning = p.child.pid;
  });

  it('(the process of the test before is gone)', () => {
    expect(leftRunning).toBeGreaterThan(0);
    expect(alive(leftRunning as number)).toBe(false);
  });
});
