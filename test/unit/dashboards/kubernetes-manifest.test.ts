import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { applyEnvOverrides, parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import { startHealthServer } from '../../../src/observability/http-server.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';
import { missingWorkerFlags } from '../../../src/runtime/worker-node-flags.ts';
import { stopPastDrainMs } from '../../../src/runtime/worker-process.ts';

const ROOT = join(import.meta.dirname, '../../..');
type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => (v ?? {}) as Obj;
const arr = (v: unknown): unknown[] => (v ?? []) as unknown[];

const docs = parseAllDocuments(readFileSync(join(ROOT, 'dashboards/kubernetes/worker.yaml'), 'utf8')).map((d) => obj(d.toJS()));
const ofKind = (kind: string): Obj => {
  const found = docs.find((d) => d.kind === kind);
  if (found === undefined) throw new Error(`dashboards/kubernetes/worker.yaml has no ${kind}`);
  return found;
};
const deployment = ofKind('Deployment');
const configMap = ofKind('ConfigMap');
const podSpec = obj(obj(obj(deployment.spec).template).spec);
const podMeta = obj(obj(obj(deployment.spec).template).metadata);
const container = obj(arr(podSpec.containers)[0]);
const env = Object.fromEntries(arr(container.env).map(obj).filter((e) => typeof e.value === 'string').map((e) => [String(e.name), String(e.value)]));
const mounts = arr(container.volumeMounts).map(obj);
const volumes = arr(podSpec.volumes).map(obj);
const command = arr(container.command).map(String);
const configPath = command[command.indexOf('--config') + 1] ?? '';
const fleetYaml = String(obj(configMap.data)['fleet.yaml']);
const config = parseFleetConfig(applyEnvOverrides(parseYaml(fleetYaml) as Obj, env));
const mountOf = (path: string): Obj | undefined => mounts.find((m) => path === m.mountPath || path.startsWith(`${String(m.mountPath)}/`));
const volumeOf = (mount: Obj | undefined): Obj | undefined => volumes.find((v) => v.name === mount?.name);

describe('dashboards/kubernetes/worker.yaml', () => {
  it('is the Deployment the KEDA ScaledObjects scale and the Kubernetes scrape job keeps', () => {
    for (const f of readdirSync(join(ROOT, 'dashboards/keda')).filter((f) => f.startsWith('scaledobject-'))) {
      const so = obj(parseYaml(readFileSync(join(ROOT, 'dashboards/keda', f), 'utf8')));
      expect(obj(obj(so.spec).scaleTargetRef).name, f).toBe(obj(deployment.metadata).name);
    }
    const labels = obj(podMeta.labels);
    expect(obj(obj(deployment.spec).selector).matchLabels).toEqual({ 'app.kubernetes.io/name': labels['app.kubernetes.io/name'] });
    // The scrape job keeps pods by this label (scrape-kubernetes.yml) and reads the port annotation.
    expect(readFileSync(join(ROOT, 'dashboards/prometheus/scrape-kubernetes.yml'), 'utf8')).toContain(`regex: ${String(labels['app.kubernetes.io/name'])}`);
    const annotations = obj(podMeta.annotations);
    expect(annotations['prometheus.io/scrape']).toBe('true');
    expect(Number(annotations['prometheus.io/port'])).toBe(config.worker.metricsPort);
  });

  it('runs one worker on device 0 with the ConfigMap as its config, a valid fleet config for one NPU', () => {
    expect(command.slice(-5)).toEqual(['worker', '--device', '0', '--config', configPath]);
    const configMount = mountOf(configPath);
    expect(volumeOf(configMount)?.configMap).toEqual({ name: obj(configMap.metadata).name });
    expect(configPath).toBe(`${String(configMount?.mountPath)}/fleet.yaml`);
    expect(config.devices.count).toBe(1);
    expect(config.devices.backend).toBe('ascend');
    expect(obj(obj(container.resources).limits)['huawei.com/Ascend910']).toBe(1);
  });

  it('keeps the journal on a volume that outlives a container restart, and mounts the model repository', () => {
    expect(volumeOf(mountOf(config.worker.journalDir))?.emptyDir).toBeDefined();
    expect(mountOf(config.modelRepository)).toBeDefined();
  });

  it('gives SIGTERM drain its time and the worker its V8 flag', () => {
    // A stopped worker may run its own bounds past the drain timeout (transport close, the addon's
    // wait for the device at exit): the kubelet's SIGKILL must come after them, with the supervisor's slack.
    const stopBoundMs = config.worker.drainTimeoutMs + stopPastDrainMs(env) + 1_000;
    expect(Number(podSpec.terminationGracePeriodSeconds) * 1000).toBeGreaterThanOrEqual(stopBoundMs);
    expect(missingWorkerFlags(config.worker, [], env.NODE_OPTIONS ?? '')).toEqual([]);
  });

  it('scales in no faster than a removed pod stops (dashboards/README.md: one pod a minute, each drains before the next goes)', () => {
    const stopBoundMs = config.worker.drainTimeoutMs + stopPastDrainMs(env) + 1_000;
    for (const f of readdirSync(join(ROOT, 'dashboards/keda')).filter((f) => f.startsWith('scaledobject-'))) {
      const spec = obj(obj(parseYaml(readFileSync(join(ROOT, 'dashboards/keda', f), 'utf8'))).spec);
      expect(Number(spec.cooldownPeriod) * 1000, f).toBeGreaterThan(config.worker.drainTimeoutMs);
      const scaleDown = obj(obj(obj(obj(spec.advanced).horizontalPodAutoscalerConfig).behavior).scaleDown);
      // Without a behavior the HPA's default scale-down window (300 s) holds.
      expect(Number(scaleDown.stabilizationWindowSeconds ?? 300) * 1000, f).toBeGreaterThan(config.worker.drainTimeoutMs);
      for (const p of arr(scaleDown.policies).map(obj)) {
        if (p.type === 'Pods') expect(Number(p.periodSeconds) * 1000, f).toBeGreaterThanOrEqual(stopBoundMs);
      }
    }
  });

  it('probes paths and the port the worker serves: /healthz up while starting, /readyz 503 until it takes work', async () => {
    const ports = arr(container.ports).map(obj);
    const named = ports.find((p) => p.name === 'metrics');
    expect(Number(named?.containerPort)).toBe(config.worker.metricsPort);
    const probes = ['startupProbe', 'livenessProbe', 'readinessProbe'].map((k) => obj(obj(container[k]).httpGet));
    for (const p of probes) expect(p.port).toBe('metrics');
    expect(probes.map((p) => p.path)).toEqual(['/healthz', '/healthz', '/readyz']);
    // The worker's own health server, as runWorker starts it before the device opens.
    const server = await startHealthServer({ port: 0, host: '127.0.0.1', metrics: new FleetMetrics({ processMetrics: false }), isReady: () => ({ ready: false, reason: 'starting' }) });
    try {
      const status = async (path: unknown) => (await fetch(`http://127.0.0.1:${server.port}${String(path)}`)).status;
      expect(await Promise.all(probes.map((p) => status(p.path)))).toEqual([200, 200, 503]);
    } finally {
      await server.close();
    }
  });
});

describe('docker-compose.yml workers', () => {
  it('get the worker V8 flag too (each runs `npu-fleet worker` on its own)', () => {
    const compose = obj(parseYaml(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true }));
    for (const name of ['worker-0', 'worker-1']) {
      const e = obj(obj(obj(compose.services)[name]).environment);
      expect(missingWorkerFlags(parseFleetConfig({}).worker, [], String(e.NODE_OPTIONS ?? '')), name).toEqual([]);
    }
  });
});
