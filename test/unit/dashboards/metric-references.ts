// Checks PromQL expressions against the metrics FleetMetrics really exports.
import { FLEET_METRICS, FleetMetrics } from '../../../src/observability/metrics.ts';

/** Labels Prometheus or our scrape configs attach to every series. */
const TARGET_LABELS = ['instance', 'job', 'fleet', 'namespace', 'pod', 'node'];

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

/** Every npu_fleet_* name mentioned. */
export function metricNamesIn(expr: string): string[] {
  return [...expr.matchAll(/\bnpu_fleet_[a-z0-9_]+\b/g)].map((m) => m[0]);
}
