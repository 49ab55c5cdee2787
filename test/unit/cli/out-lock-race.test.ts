import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../../helpers/temp-dir.ts';

const CONTENDER = join(dirname(fileURLToPath(import.meta.url)), 'fixtures/out-lock-contender.ts');
const dir = tempDir('npu-fleet-out-lock-race-');

interface Contender {
  readonly child: ChildProcessWithoutNullStreams;
  readonly lines: AsyncIterator<string>;
  readonly reader: Interface;
}

const contenders: Contender[] = [];

afterAll(() => {
  for (const c of contenders) {
    c.reader.close();
    c.child.kill();
  }
});

function contender(): Contender {
  const child = spawn(process.execPath, ['--import', 'tsx', CONTENDER], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stderr.on('data', (d: Buffer) => process.stderr.write(d));
  const reader = createInterface({ input: child.stdout });
  const c = { child, reader, lines: reader[Symbol.asyncIterator]() };
  contenders.push(c);
  return c;
}

async function ask(c: Contender, command: string): Promise<string> {
  c.child.stdin.write(`${command}\n`);
  const next = await c.lines.next();
  if (next.done === true) throw new Error(`contender ${c.child.pid} ended`);
  return next.value;
}

describe('OutLock takeover of a stale lock (publish --out)', () => {
  // A read-check-unlink-create takeover is not atomic: two runs that both judged the lock stale
  // each unlinked it and made their own, the second unlinking the lock the first had just made,
  // and both wrote RESULTS.
  it('runs taking over one stale lock at the same moment: exactly one wins, every other is refused naming it', { timeout: 120_000 }, async () => {
    const deadPid = spawnSync(process.execPath, ['-e', '0']).pid ?? 0;
    expect(deadPid).toBeGreaterThan(0);
    const runs = Array.from({ length: 3 }, contender);
    const rounds = 200;
    const winnersByRound: number[] = [];
    const unnamed: string[] = [];
    for (let round = 0; round < rounds; round++) {
      const out = join(dir, `results-${round}.jsonl`);
      // Left by a run of this host that died: taken over at once (a stale one of another host takes the same path).
      writeFileSync(`${out}.lock`, `${JSON.stringify({ pid: deadPid, host: hostname() })}\n`);
      if (round % 2 === 1) {
        // Every other round a run killed mid-takeover left its marker too: the runs contend for the next one.
        const st = statSync(`${out}.lock`, { bigint: true });
        writeFileSync(`${out}.lock.takeover-${st.ino}-${st.mtimeNs}.1`, `${JSON.stringify({ pid: deadPid, host: hostname() })}\n`);
      }
      // Started a few microseconds apart, a different step each round: a takeover that is not
      // atomic loses only when one run's read comes before another's unlink and its own unlink after
      // the other's create, a window of tens of microseconds whose place depends on the machine.
      const at = Date.now() + 20;
      const stepMs = (round % 20) * 0.005;
      const answers = await Promise.all(runs.map((c, k) => ask(c, `go ${out} ${at + k * stepMs}`)));
      const won = answers.filter((a) => a.startsWith('won '));
      winnersByRound.push(won.length);
      const winners = new Set(won.map((a) => a.split(' ')[1]));
      // A loser names the run that holds the lock (not an unnamed "another run": a lock read before its holder was written into it).
      for (const a of answers.filter((x) => x.startsWith('refused '))) {
        const named = /being written by another run \(process (\d+) on /.exec(a)?.[1];
        if (named === undefined || !winners.has(named)) unnamed.push(a.split(' ').slice(2).join(' '));
      }
      await Promise.all(runs.map((c) => ask(c, 'release')));
    }
    const shared = winnersByRound.filter((n) => n !== 1).length;
    console.log(`out-lock takeover race: ${shared} of ${rounds} rounds without exactly one winner (winners by round: ${winnersByRound.join('')}); ${unnamed.length} refusals not naming the winner`);
    expect(winnersByRound).toEqual(Array.from({ length: rounds }, () => 1));
    expect(unnamed).toEqual([]);
    // Nothing left behind but the results' names (no takeover marker or temporary lock).
    expect(readdirSync(dir).filter((f) => !/^results-\d+\.jsonl$/.test(f))).toEqual([]);
  });
});
