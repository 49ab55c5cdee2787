import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../../..');

/**
 * The alert rules and the KEDA backlog and lag queries carry promtool unit tests (series in, expected values
 * out). They run here so a rule or query edited into a wrong answer fails `npm test`, not a pager.
 * promtool comes with Debian's `prometheus` package, which .ci/run installs; without it this fails
 * and says how to get it (nothing is skipped).
 */
function promtool(args: string[]): { status: number | null; output: string; missing: boolean } {
  const r = spawnSync('promtool', args, { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  const missing = (r.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
  return { status: r.status, output: `${r.stdout ?? ''}${r.stderr ?? ''}`, missing };
}

describe('promtool unit tests of the dashboards', () => {
  for (const file of ['dashboards/prometheus/alerts.test.yml', 'dashboards/keda/backlog-query.test.yml', 'dashboards/keda/lag-query.test.yml']) {
    it(`promtool test rules ${file}`, () => {
      const r = promtool(['test', 'rules', file]);
      if (r.missing) throw new Error('promtool is not on PATH: install it (Debian: apt-get install --no-install-recommends prometheus) to run the rule tests');
      expect(r.output).toContain('SUCCESS');
      expect(r.status, r.output).toBe(0);
    });
  }
});
