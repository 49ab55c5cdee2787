// Checks PromQL expressions against the metrics FleetMetrics really exports.
import { FLEET_METRICS, FleetMetrics } from '../../../src/observability/metrics.ts';

/**
 * Labels on every series: Prometheus's and our scrape configs' target labels, and `worker`, the
 * default label runWorker gives each worker's FleetMetrics.
 */
const TARGET_LABELS = ['instance', 'job', 'fleet', 'namespace', 'pod', 'node', 'worker'];

export interface KnownMetrics {
  /** series name → labels it may carry */
  series: Map<string, Set<string>>;
}

export async function knownMetrics(): Promise<KnownMetrics> {
  const series = new Map<string, Set<string>>();
  const add = (name: string, labels: readonly string[]) => series.set(name, new Set([...labels, ...TARGET_LABELS]));
  for (const def of Object.values(FLEET_METRICS)) {
    if (def.kind === 'histogram') {
      add(`${def.name}_bucket`, [...def.labels, 'le']);
      add(`${def.name}_sum`, def.labels);
      add(`${def.name}_count`, def.labels);
    } else {
      add(def.name, def.labels);
    }
  }
  // Process metrics: whatever prom-client really renders with our prefix (labels not checked).
  const fleetNames = new Set<string>(Object.values(FLEET_METRICS).map((d) => d.name));
  const text = await new FleetMetrics().render();
  for (const line of text.split('\n')) {
    const m = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (!m?.[1] || fleetNames.has(m[1])) continue;
    const names = m[2] === 'histogram' ? [`${m[1]}_bucket`, `${m[1]}_sum`, `${m[1]}_count`] : [m[1]];
    for (const n of names) series.set(n, new Set(['*']));
  }
  return { series };
}

/** Problems in one PromQL expression: unknown npu_fleet_* names, unknown selector labels. */
export function checkExpression(expr: string, known: KnownMetrics): string[] {
  const problems: string[] = [];
  const names = [...expr.matchAll(/\b(npu_fleet_[a-z0-9_]+)\b(\{[^}]*\})?/g)];
  for (const match of names) {
    const name = match[1] as string;
    const labels = known.series.get(name);
    if (!labels) {
      problems.push(`unknown metric ${name}`);
      continue;
    }
    if (labels.has('*') || !match[2]) continue;
    for (const sel of match[2].slice(1, -1).split(',')) {
      const label = /^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)/.exec(sel)?.[1];
      if (label !== undefined && !labels.has(label)) problems.push(`${name} has no label ${label}`);
    }
  }
  return problems;
}

/**
 * Labels an expression groups or matches on (`by`, `without`, `on`, `ignoring`, `group_left`,
 * `group_right`) and those its legend or alert annotations print (`{{label}}`, `$labels.label`)
 * that none of its npu_fleet_* metrics carries: a typo there matches nothing (`on`), merges what
 * should stay apart (`by`) or prints an empty string. An expression on process metrics only (labels
 * not known) is not checked.
 */
export function checkLabelsUsed(expr: string, known: KnownMetrics, printed = ''): string[] {
  const carried = new Set<string>();
  for (const name of metricNamesIn(expr)) {
    const labels = known.series.get(name);
    if (labels === undefined) continue;
    if (labels.has('*')) return [];
    for (const l of labels) carried.add(l);
  }
  if (carried.size === 0) return [];
  const grouped = [...expr.matchAll(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)].flatMap((m) =>
    (m[1] as string).split(',').map((l) => l.trim()).filter((l) => l !== ''),
  );
  const shown = [...printed.matchAll(/\{\{\s*([a-zA-Z_]\w*)\s*\}\}|\$labels\.([a-zA-Z_]\w*)/g)].map((m) => (m[1] ?? m[2]) as string);
  return [...new Set([...grouped, ...shown])].filter((l) => !carried.has(l)).map((l) => `no metric in it has label ${l}`);
}

/** Every npu_fleet_* name mentioned. */
export function metricNamesIn(expr: string): string[] {
  return [...expr.matchAll(/\bnpu_fleet_[a-z0-9_]+\b/g)].map((m) => m[0]);
}
