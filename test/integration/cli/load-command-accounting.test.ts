// `npu-fleet load` on a real Redis (BullMQ) with no worker serving the model: what its per-second
// lines and its summary say of requests that get no reply, are held back, or are given up on by
// a second Ctrl-C. No worker is needed: every request sent is one the fleet does not answer.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { stringify } from 'yaml';
import { main } from '../../../src/cli/main.ts';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

let stdout: string[] = [];
beforeEach(() => {
  stdout = [];
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => (stdout.push(String(chunk)), true));
  vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
});
afterEach(() => vi.restoreAllMocks());

function configFile(): string {
  const dir = tempDir('npu-fleet-loadacct-');
  const file = join(dir, 'fleet.yaml');
  const transport = { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('loadacct') } };
  writeFileSync(file, stringify({ transport, modelRepository: 'examples/models', models: ['mlp-classifier'], log: { level: 'warn' } }));
  return file;
}

/** `outcome N` pairs of a line's counts part, summed into `into`. */
function addCounts(part: string, into: Map<string, number>): Map<string, number> {
  for (const m of part.matchAll(/([a-z][a-z ]*?) (\d+)/g)) into.set((m[1] ?? '').trim(), (into.get((m[1] ?? '').trim()) ?? 0) + Number(m[2]));
  return into;
}

const lines = (): string[] => stdout.join('').split('\n');
const progressLines = (): string[] => lines().filter((l) => l.startsWith('sent '));

function summary(): { sent: number; counts: Map<string, number>; line: string } {
  const line = lines().find((l) => /^(done|stopped by \w+): sent /.test(l)) ?? '';
  return { sent: Number(/sent (\d+)/.exec(line)?.[1] ?? NaN), counts: addCounts(line.split(' | ')[1] ?? '', new Map()), line };
}

const sum = (m: ReadonlyMap<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);

describe('load: accounting of requests without a reply (BullMQ, no worker)', () => {
  it('the per-second lines add up to the summary: the part-second before the end is printed too', { timeout: 60_000 }, async () => {
    // Replies time out 1.5 s after each send (0-2 s): from 1.5 to 3.5 s, past the last whole second.
    const code = await main(['load', '--config', configFile(), '--model', 'mlp-classifier', '--rate', '20', '--seconds', '2', '--timeout-ms', '1500', '--drain-ms', '5000']);
    expect(code).toBe(1);
    const s = summary();
    expect(s.sent, s.line).toBe(40);
    expect(s.counts.get('no reply'), s.line).toBe(40);
    const perSecond = progressLines().reduce((m, l) => addCounts(l.split(' | ').at(-1) ?? '', m), new Map<string, number>());
    expect(perSecond.get('no reply'), stdout.join('')).toBe(40);
  });

  it('a request held back (over --max-outstanding) shows on the per-second line it was due in, not only in the summary', { timeout: 60_000 }, async () => {
    const code = await main(['load', '--config', configFile(), '--model', 'mlp-classifier', '--rate', '100', '--seconds', '2', '--max-outstanding', '10', '--timeout-ms', '60000', '--drain-ms', '200']);
    expect(code).toBe(1);
    const s = summary();
    expect(s.sent, s.line).toBe(10);
    expect(s.line).toMatch(/held back 190 \(over --max-outstanding/);
    // The line of a second that sent 0 of its 100 said only 'sent 0/s': as if the rate were lower.
    const held = progressLines().map((l) => Number(/held back (\d+)(\/s| in [\d.]+ s)/.exec(l)?.[1] ?? 0));
    expect(held.some((n) => n > 50), stdout.join('')).toBe(true);
  });

  it('a second Ctrl-C: the requests it stops waiting for are counted in the summary', { timeout: 60_000 }, async () => {
    const before = new Set(process.listeners('SIGINT'));
    const running = main(['load', '--config', configFile(), '--model', 'mlp-classifier', '--rate', '50', '--timeout-ms', '60000', '--drain-ms', '60000']);
    const interrupt = (): void => {
      const added = process.listeners('SIGINT').filter((l) => !before.has(l));
      expect(added.length).toBeGreaterThan(0);
      for (const l of added) (l as (s: NodeJS.Signals) => void)('SIGINT');
    };
    await new Promise((r) => setTimeout(r, 800));
    interrupt(); // stop sending, wait for the replies (up to --drain-ms)
    await new Promise((r) => setTimeout(r, 300));
    interrupt(); // stop waiting
    const code = await Promise.race([running, new Promise<string>((r) => setTimeout(() => r('still running 10 s after the second Ctrl-C'), 10_000))]);
    expect(code).toBe(1);
    const s = summary();
    expect(s.line).toMatch(/^stopped by SIGINT: sent \d+/);
    expect(s.sent, s.line).toBeGreaterThan(10);
    // Before: 'stopped by SIGINT: sent 45 | no replies | ...': the 45 requests were in no count.
    expect(sum(s.counts), s.line).toBe(s.sent);
  });
});
