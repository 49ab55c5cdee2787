import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';

/**
 * The Grafana panels that total a counter over the dashboard's time range, evaluated by promtool
 * as Grafana would run them. A worker creates a labelled counter series on its first event, so the
 * series appears at 1 (or at a burst's count), and increase() over a series whose first sample is 1
 * is 0: a reason that happened once in the range must still show.
 */
const ROOT = join(import.meta.dirname, '../../..');
type Obj = Record<string, unknown>;
const dash = JSON.parse(readFileSync(join(ROOT, 'dashboards/grafana/npu-fleet.json'), 'utf8')) as { panels: Obj[] };
const dir = mkdtempSync(join(tmpdir(), 'npu-fleet-grafana-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function target(panelTitle: string, refId: string): string {
  const panel = dash.panels.find((p) => p.title === panelTitle);
  const t = (panel?.targets as Obj[] | undefined)?.find((x) => x.refId === refId);
  if (typeof t?.expr !== 'string') throw new Error(`no target ${refId} in panel "${panelTitle}"`);
  return t.expr;
}

/** The dashboard's variables as Grafana fills them: all models and instances, a 1 h range. */
const asGrafanaRuns = (expr: string): string =>
  expr.replaceAll('$model', '.*').replaceAll('$instance', '.*').replaceAll('$__range', '1h').replaceAll('$__rate_interval', '1m');

interface Case {
  series: Array<{ series: string; values: string }>;
  exp: Array<{ labels: string; value: number }>;
}

/** Evaluates `expr` at minute 60 over `c.series` with promtool; its output on failure. */
function promtoolEval(name: string, expr: string, c: Case): { status: number | null; output: string } {
  const file = join(dir, `${name}.test.yml`);
  writeFileSync(file, stringify({
    rule_files: [],
    evaluation_interval: '1m',
    tests: [{ interval: '1m', input_series: c.series, promql_expr_test: [{ expr, eval_time: '60m', exp_samples: c.exp }] }],
  }));
  const r = spawnSync('promtool', ['test', 'rules', file], { encoding: 'utf8', timeout: 60_000 });
  if ((r.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    throw new Error('promtool is not on PATH: install it (Debian: apt-get install --no-install-recommends prometheus)');
  }
  return { status: r.status, output: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

const w0 = 'job="npu-fleet",instance="w0:9464",worker="device-0"';

describe('Grafana totals over the time range count a counter from its first event', () => {
  it('"Not served, by reason (over the time range)" lists a code that appeared once, and the running ones', () => {
    const expr = asGrafanaRuns(target('Not served, by reason (over the time range)', 'A'));
    const r = promtoolEval('unserved-table', expr, {
      series: [
        // one request for a model no worker serves, 30 minutes into the range
        { series: `npu_fleet_unserved_total{${w0},model="m",status="rejected",code="UNKNOWN_MODEL"}`, values: '_x29 1x40' },
        // a burst of 40 expired requests that the first scrape of its series saw at once
        { series: `npu_fleet_unserved_total{${w0},model="m",status="expired",code="DEADLINE_EXCEEDED"}`, values: '_x39 40x30' },
        // rejected all along: 1 a minute
        { series: `npu_fleet_unserved_total{${w0},model="m",status="rejected",code="QUEUE_FULL"}`, values: '0+1x70' },
      ],
      exp: [
        { labels: '{model="m",status="rejected",code="UNKNOWN_MODEL"}', value: 1 },
        { labels: '{model="m",status="expired",code="DEADLINE_EXCEEDED"}', value: 40 },
        { labels: '{model="m",status="rejected",code="QUEUE_FULL"}', value: 60 },
      ],
    });
    expect(r.output).toContain('SUCCESS');
    expect(r.status, r.output).toBe(0);
  });

  it('the load failures line shows a version that failed once', () => {
    const expr = asGrafanaRuns(target('Worker restarts, model version load failures, slow model repository scans, workers serving each version', 'B'));
    const r = promtoolEval('load-failures', expr, {
      series: [
        { series: `npu_fleet_model_load_failures_total{${w0},model="m"}`, values: '_x29 1x40' },
        { series: `npu_fleet_model_load_failures_total{job="npu-fleet",instance="w1:9465",worker="device-1",model="n"}`, values: '0x20 1x50' },
      ],
      exp: [
        { labels: '{model="m"}', value: 1 },
        { labels: '{model="n"}', value: 1 },
      ],
    });
    expect(r.output).toContain('SUCCESS');
    expect(r.status, r.output).toBe(0);
  });
});
