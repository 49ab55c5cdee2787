import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { applyEnvOverrides, parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { FLEET_DEFAULTS, FleetConfigSchema } from '../../../src/contracts/fleet-config.ts';
import { FLEET_METRICS } from '../../../src/observability/metrics.ts';
import { checkExpression, checkLabelsUsed, knownMetrics, metricNamesIn, type KnownMetrics } from './metric-references.ts';

const ROOT = join(import.meta.dirname, '../../..');
/** Series from kube-state-metrics that alert rules may read (the fleet's own restart counter stays 0 on Kubernetes). */
const KUBE_STATE_SERIES = ['kube_pod_container_status_restarts_total'];
const DASH = join(ROOT, 'dashboards');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)],
  );
}
// merge: docker-compose uses YAML merge keys (`<<: *worker`)
const yamlDoc = (path: string): unknown => parseYaml(readFileSync(join(ROOT, path), 'utf8'), { merge: true });
type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => v as Obj;
const arr = (v: unknown): unknown[] => v as unknown[];

let known: KnownMetrics;
beforeAll(async () => {
  known = await knownMetrics();
});

describe('metric reference checker', () => {
  it('flags unknown metrics and labels a metric does not carry, and accepts real ones', () => {
    expect(checkExpression('rate(npu_fleet_requests_total{status="ok", model=~"m"}[5m])', known)).toEqual([]);
    expect(checkExpression('histogram_quantile(0.9, rate(npu_fleet_queue_wait_seconds_bucket{le="1"}[1m]))', known)).toEqual([]);
    expect(checkExpression('npu_fleet_request_total', known)).toEqual(['unknown metric npu_fleet_request_total']);
    expect(checkExpression('npu_fleet_end_to_end_latency_seconds', known)).toEqual([
      'unknown metric npu_fleet_end_to_end_latency_seconds',
    ]);
    expect(checkExpression('npu_fleet_batch_size_sum{gear="8"}', known)).toEqual(['npu_fleet_batch_size_sum has no label gear']);
    expect(checkExpression('npu_fleet_nodejs_eventloop_lag_p99_seconds > 0.1', known)).toEqual([]);
  });

  it('flags grouping, matching and printed labels no metric of the expression carries', () => {
    const stalled = 'sum by (instance, device) (npu_fleet_batches_in_flight) > 0 unless on (instance, device) sum by (instance, device) (rate(npu_fleet_batches_total[2m])) > 0';
    expect(checkLabelsUsed(stalled, known, 'Device {{ $labels.device }} on {{ $labels.instance }}: {{ $value | humanize }}')).toEqual([]);
    expect(checkLabelsUsed(stalled.replace('on (instance, device)', 'on (instance, devcie)'), known)).toEqual(['no metric in it has label devcie']);
    expect(checkLabelsUsed('sum by (le, priority) (rate(npu_fleet_batch_size_bucket[5m]))', known)).toEqual(['no metric in it has label priority']);
    expect(checkLabelsUsed('sum by (model) (npu_fleet_duplicates_total)', known, '{{ $labels.reason }}')).toEqual(['no metric in it has label reason']);
    expect(checkLabelsUsed('sum by (model) (npu_fleet_dlq_total)', known, '{{modle}} dlq')).toEqual(['no metric in it has label modle']);
    expect(checkLabelsUsed('count by (model, instance, worker) (npu_fleet_model_version_served)', known)).toEqual([]);
    expect(checkLabelsUsed('rate(npu_fleet_process_cpu_seconds_total[1m])', known, '{{instance}}')).toEqual([]);
  });
});

describe('dashboards/ files', () => {
  it('every JSON and YAML file parses', () => {
    const all = files(DASH).filter((f) => /\.(json|ya?ml)$/.test(f));
    expect(all.length).toBeGreaterThanOrEqual(9);
    for (const f of all) {
      const text = readFileSync(f, 'utf8');
      if (f.endsWith('.json')) expect(() => JSON.parse(text), f).not.toThrow();
      else for (const doc of parseAllDocuments(text, { merge: true })) expect(doc.errors, relative(ROOT, f)).toEqual([]);
    }
  });

  it('the Grafana dashboard uses only real metrics and labels, with unique panel ids', () => {
    const dash = JSON.parse(readFileSync(join(DASH, 'grafana/npu-fleet.json'), 'utf8')) as Obj;
    expect(dash.uid).toBe('npu-fleet');
    const panels = arr(dash.panels).map(obj);
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const exprs: string[] = [];
    const labelProblems: string[] = [];
    for (const p of panels) {
      if (p.type === 'row') continue;
      const targets = arr(p.targets).map(obj);
      expect(targets.length, String(p.title)).toBeGreaterThan(0);
      for (const t of targets) {
        exprs.push(String(t.expr));
        labelProblems.push(...checkLabelsUsed(String(t.expr), known, String(t.legendFormat ?? '')).map((e) => `${e} in panel ${String(p.title)}: ${String(t.expr)}`));
      }
    }
    for (const v of arr(obj(dash.templating).list).map(obj)) {
      if (typeof v.definition !== 'string') continue;
      exprs.push(v.definition);
      // label_values(metric, label)
      const m = /^label_values\((\w+),\s*(\w+)\)$/.exec(v.definition);
      if (m) labelProblems.push(...checkLabelsUsed(`sum by (${m[2] as string}) (${m[1] as string})`, known).map((e) => `${e} in variable ${String(v.name)}`));
    }
    expect(labelProblems).toEqual([]);
    const problems = exprs.flatMap((e) => checkExpression(e, known).map((p) => `${p} in: ${e}`));
    expect(problems).toEqual([]);
    // the dashboard shows every metric the issue asks for
    const used = new Set(exprs.flatMap(metricNamesIn).map((n) => n.replace(/_(bucket|sum|count)$/, '')));
    for (const def of Object.values(FLEET_METRICS)) expect(used, def.name).toContain(def.name);
    expect(used).toContain('npu_fleet_nodejs_eventloop_lag_p99_seconds');
  });

  it('never adds up one device index across hosts: grouping by device also groups by instance', () => {
    const dash = JSON.parse(readFileSync(join(DASH, 'grafana/npu-fleet.json'), 'utf8')) as Obj;
    const rules = arr(obj(yamlDoc('dashboards/prometheus/alerts.yml')).groups).flatMap((g) => arr(obj(g).rules).map(obj));
    const exprs = [
      ...arr(dash.panels).map(obj).flatMap((p) => arr(p.targets ?? []).map((t) => String(obj(t).expr))),
      ...rules.map((r) => String(r.expr)),
    ];
    // Every worker host numbers its devices from 0: `device="0"` is one NPU per host.
    const problems = exprs.filter((e) => [...e.matchAll(/\b(?:by|on)\s*\(([^)]*)\)/g)].some((m) => /\bdevice\b/.test(m[1] as string) && !/\binstance\b/.test(m[1] as string)));
    expect(problems).toEqual([]);
  });

  it('alert rules are well formed and reference only real metrics and labels', () => {
    const doc = obj(yamlDoc('dashboards/prometheus/alerts.yml'));
    const rules = arr(doc.groups).flatMap((g) => arr(obj(g).rules).map(obj));
    expect(rules.length).toBeGreaterThanOrEqual(8);
    const names = rules.map((r) => r.alert);
    expect(new Set(names).size).toBe(names.length);
    for (const r of rules) {
      expect(r.alert, JSON.stringify(r)).toMatch(/^NpuFleet[A-Za-z]+$/);
      expect(['critical', 'warning', 'info']).toContain(obj(r.labels).severity);
      expect(typeof obj(r.annotations).summary).toBe('string');
      const expr = String(r.expr);
      expect(checkExpression(expr, known), `${String(r.alert)}: ${expr}`).toEqual([]);
      expect(checkLabelsUsed(expr, known, JSON.stringify(r.annotations ?? {})), `${String(r.alert)}: ${expr}`).toEqual([]);
      const external = KUBE_STATE_SERIES.filter((name) => expr.includes(name)).length;
      expect(metricNamesIn(expr).length + (expr.includes('up{') ? 1 : 0) + external, String(r.alert)).toBeGreaterThan(0);
      if (r.for !== undefined) expect(String(r.for)).toMatch(/^\d+[smh]$/);
    }
  });

  it("the Kubernetes restart rule selects the manifest's worker container and its Deployment's pods", () => {
    const rules = arr(obj(yamlDoc('dashboards/prometheus/alerts.yml')).groups).flatMap((g) => arr(obj(g).rules).map(obj));
    const rule = rules.find((r) => r.alert === 'NpuFleetPodRestarting');
    const expr = String(rule?.expr);
    const manifest = readFileSync(join(ROOT, 'dashboards/kubernetes/worker.yaml'), 'utf8');
    const deployment = /kind: Deployment\nmetadata:\n {2}name: (\S+)/.exec(manifest)?.[1];
    const container = /containers:\n\s+- name: (\S+)/.exec(manifest)?.[1];
    expect(deployment).toBe('npu-fleet-worker');
    expect(expr).toContain(`container="${String(container)}"`);
    // A Deployment's pods are named <deployment>-<replicaset hash>-<pod hash>.
    const podPattern = new RegExp(`^(?:${/pod=~"([^"]+)"/.exec(expr)?.[1] ?? '$^'})$`);
    expect(podPattern.test(`${deployment}-7d9f5c6b8-x2k4q`)).toBe(true);
    expect(podPattern.test('other-app-7d9f5c6b8-x2k4q')).toBe(false);
  });

  it('the compose Prometheus config loads the alert rules and scrapes worker N on 9464 + N', () => {
    const cfg = obj(yamlDoc('dashboards/prometheus/prometheus.yml'));
    expect(arr(cfg.rule_files)).toEqual(['/etc/prometheus/alerts.yml']);
    const job = obj(arr(cfg.scrape_configs)[0]);
    expect(job.job_name).toBe('npu-fleet');
    const targets = arr(obj(arr(job.static_configs)[0]).targets);
    expect(targets).toEqual([0, 1].map((n) => `worker-${n}:${FLEET_DEFAULTS.metricsPort + n}`));
    const k8s = obj(arr(obj(yamlDoc('dashboards/prometheus/scrape-kubernetes.yml')).scrape_configs)[0]);
    expect(k8s.job_name).toBe('npu-fleet');
  });

  it('KEDA ScaledObjects match the fleet defaults (group id, BullMQ keys) and query real metrics', () => {
    const defaults = FleetConfigSchema.parse({
      transport: { kind: 'kafka', kafka: { brokers: ['x:1'] } },
    });
    const groupId = defaults.transport.kind === 'kafka' ? defaults.transport.kafka.groupId : '';
    const load = (f: string) => obj(yamlDoc(`dashboards/keda/${f}`));
    const triggersOf = (so: Obj) => arr(obj(so.spec).triggers).map(obj);
    for (const f of ['scaledobject-kafka.yaml', 'scaledobject-bullmq.yaml', 'scaledobject-prometheus.yaml', 'scaledobject-backlog.yaml']) {
      const so = load(f);
      expect(so.apiVersion).toBe('keda.sh/v1alpha1');
      expect(so.kind).toBe('ScaledObject');
      expect(obj(obj(so.spec).scaleTargetRef).name).toBe('npu-fleet-worker');
      for (const t of triggersOf(so)) {
        // KEDA trigger metadata is a map of strings; YAML numbers/booleans would be rejected
        for (const [k, v] of Object.entries(obj(t.metadata))) expect(typeof v, `${f} ${k}`).toBe('string');
      }
    }
    const kafka = obj(triggersOf(load('scaledobject-kafka.yaml'))[0]?.metadata);
    expect(kafka.consumerGroup).toBe(groupId);
    const model = 'mlp-classifier';
    expect(existsSync(join(ROOT, 'examples/models', model))).toBe(true);
    const queue = FLEET_DEFAULTS.bullmqQueueTemplate.replace('{model}', model);
    const keys = triggersOf(load('scaledobject-bullmq.yaml')).map((t) => obj(t.metadata).listName);
    expect(keys).toEqual([`${FLEET_DEFAULTS.bullmqPrefix}:${queue}:wait`, `${FLEET_DEFAULTS.bullmqPrefix}:${queue}:prioritized`]);
    const query = String(obj(triggersOf(load('scaledobject-prometheus.yaml'))[0]?.metadata).query);
    expect(checkExpression(query, known)).toEqual([]);
    expect(checkLabelsUsed(query, known)).toEqual([]);
    expect(metricNamesIn(query)).toContain('npu_fleet_source_lag');
    // promtool's test of the query (dashboards/keda/lag-query.test.yml) tests this very query.
    const promtool = obj(yamlDoc('dashboards/keda/lag-query.test.yml'));
    const tested = arr(promtool.tests).flatMap((t) => arr(obj(t).promql_expr_test).map((e) => String(obj(e).expr)));
    expect(tested.length).toBeGreaterThan(0);
    for (const expr of tested) expect(expr).toBe(query);
  });

  it('the backlog ScaledObject adds the broker part once (max by model) and the local parts of all workers, over a drain target', () => {
    const so = obj(yamlDoc('dashboards/keda/scaledobject-backlog.yaml'));
    expect(obj(obj(so.spec).scaleTargetRef).name).toBe('npu-fleet-worker');
    const trigger = obj(arr(obj(so.spec).triggers)[0]);
    expect(trigger.type).toBe('prometheus');
    const meta = obj(trigger.metadata);
    const query = String(meta.query);
    expect(checkExpression(query, known)).toEqual([]);
    expect(checkLabelsUsed(query, known)).toEqual([]);
    const flat = query.replace(/\s+/g, ' ');
    // Every worker reports the group's lag: summed, it would count it once per worker.
    expect(flat).toContain('max by (model) (npu_fleet_source_backlog_seconds{');
    expect(flat).toMatch(/sum\(npu_fleet_local_backlog_seconds\{/);
    // The per-worker view (lag + own queue) is not additive across workers.
    expect(metricNamesIn(query)).not.toContain('npu_fleet_backlog_seconds');
    expect(flat).toContain(') / 30');
    expect(meta.threshold).toBe('1');
    // promtool's test of the query (dashboards/keda/backlog-query.test.yml) tests this very query.
    const promtool = obj(yamlDoc('dashboards/keda/backlog-query.test.yml'));
    const tested = arr(promtool.tests).flatMap((t) => arr(obj(t).promql_expr_test).map((e) => String(obj(e).expr)));
    expect(tested.length).toBeGreaterThan(0);
    for (const expr of tested) expect(expr).toBe(query);
  });
});

describe('docker-compose.yml', () => {
  const compose = obj(yamlDoc('docker-compose.yml'));
  const services = obj(compose.services);
  const interpolate = (v: string) => v.replace(/\$\{(\w+):-([^}]*)\}/g, (_, _name: string, def: string) => def);

  it('has the brokers, monitoring and one worker per device, mounting files that exist', () => {
    for (const s of ['kafka', 'redis', 'prometheus', 'grafana', 'worker-0', 'worker-1']) expect(Object.keys(services)).toContain(s);
    for (const s of Object.values(services).map(obj)) {
      for (const v of arr(s.volumes ?? []).map(String)) {
        const host = v.split(':')[0] as string;
        if (host.startsWith('.')) expect(existsSync(join(ROOT, host)), v).toBe(true);
      }
    }
  });

  it.each([0, 1])('worker-%i runs `worker --device N` with an env that is a valid fleet config on both transports', (n) => {
    const w = obj(services[`worker-${n}`]);
    expect(arr(w.command).slice(-3)).toEqual(['worker', '--device', String(n)]);
    const port = FLEET_DEFAULTS.metricsPort + n;
    expect(arr(w.ports)).toEqual([`${port}:${port}`]);
    const env = Object.fromEntries(Object.entries(obj(w.environment)).map(([k, v]) => [k, interpolate(String(v))]));
    const config = parseFleetConfig(applyEnvOverrides({}, env));
    expect(config.transport.kind).toBe('kafka');
    expect(config.devices.count).toBeGreaterThan(n);
    expect(config.worker.metricsPort).toBe(FLEET_DEFAULTS.metricsPort);
    const bull = parseFleetConfig(applyEnvOverrides({}, { ...env, NPU_FLEET__TRANSPORT__KIND: 'bullmq' }));
    expect(bull.transport.kind === 'bullmq' && bull.transport.bullmq.redisUrl).toBe('redis://redis:6379');
  });
});
