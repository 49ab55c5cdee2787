import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { startHealthServer, type HealthServer } from '../../../src/observability/http-server.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';

const servers: HealthServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map(async (s) => s.close()));
});

async function start(options: Omit<Parameters<typeof startHealthServer>[0], 'port' | 'host'>): Promise<string> {
  const server = await startHealthServer({ port: 0, host: '127.0.0.1', ...options });
  servers.push(server);
  expect(server.port).toBeGreaterThan(0);
  return `http://127.0.0.1:${server.port}`;
}

describe('startHealthServer', () => {
  it('serves /metrics in the registry content type', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    metrics.observeResult('mlp', 'ok', 0.01, 0);
    const base = await start({ metrics, isReady: () => true });
    const res = await fetch(`${base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe(metrics.contentType);
    const text = await res.text();
    expect(text).toContain('npu_fleet_requests_total{model="mlp",status="ok"} 1');
    expect(text).toContain('# TYPE npu_fleet_end_to_end_latency_seconds histogram');
  });

  it('answers /healthz and flips /readyz to 503 with the reason', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    let state: { ready: boolean; reason?: string } = { ready: true };
    const base = await start({ metrics, isReady: () => state });
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ok = await fetch(`${base}/readyz?verbose=1`);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ status: 'ready' });

    state = { ready: false, reason: 'draining: SIGTERM received' };
    const down = await fetch(`${base}/readyz`);
    expect(down.status).toBe(503);
    expect(down.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await down.json()).toEqual({ status: 'not ready', reason: 'draining: SIGTERM received' });
    // liveness is independent of readiness
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
  });

  it('reports unhealthy (503) from the liveness probe, and a throwing probe as 503 with its message', async () => {
    const metrics = new FleetMetrics({ processMetrics: false });
    let healthy: boolean | { healthy: boolean; reason?: string } = true;
    const base = await start({
      metrics,
      isReady: () => {
        throw new Error('device not open');
      },
      isHealthy: () => healthy,
    });
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    healthy = { healthy: false, reason: 'device hang past 30000 ms' };
    const sick = await fetch(`${base}/healthz`);
    expect(sick.status).toBe(503);
    expect(await sick.json()).toEqual({ status: 'unhealthy', reason: 'device hang past 30000 ms' });
    healthy = false;
    expect(await (await fetch(`${base}/healthz`)).json()).toEqual({ status: 'unhealthy' });
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { reason: string }).reason).toContain('device not open');
  });

  it('returns 404 for unknown paths and 405 for other methods', async () => {
    const base = await start({ metrics: new FleetMetrics({ processMetrics: false }), isReady: () => true });
    expect((await fetch(`${base}/`)).status).toBe(404);
    expect((await fetch(`${base}/metricsx`)).status).toBe(404);
    const post = await fetch(`${base}/metrics`, { method: 'POST', body: 'x' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    const head = await fetch(`${base}/readyz`, { method: 'HEAD' });
    expect(head.status).toBe(200);
  });

  it('fails with a FleetError naming the port when it is taken, and close() is idempotent', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    try {
      const attempt = startHealthServer({ port, host: '127.0.0.1', metrics: new FleetMetrics({ processMetrics: false }), isReady: () => true });
      await expect(attempt).rejects.toSatisfy(
        (e: unknown) =>
          FleetError.is(e, 'SERVICE_UNAVAILABLE') && e.message.includes(String(port)) && e.message.includes('choose another worker.metricsPort'),
      );
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()));
    }

    // worker.metricsPort 65535 on device 1: Node throws a bare RangeError from listen() itself.
    const outOfRange = startHealthServer({ port: 65536, host: '127.0.0.1', metrics: new FleetMetrics({ processMetrics: false }), isReady: () => true });
    await expect(outOfRange).rejects.toSatisfy(
      (e: unknown) => FleetError.is(e, 'INVALID_CONFIG') && e.message.includes('65536') && e.message.includes('lower worker.metricsPort'),
    );

    const server = await startHealthServer({ port: 0, host: '127.0.0.1', metrics: new FleetMetrics({ processMetrics: false }), isReady: () => true });
    const url = `http://127.0.0.1:${server.port}/healthz`;
    expect((await fetch(url)).status).toBe(200);
    await Promise.all([server.close(), server.close()]);
    await expect(fetch(url)).rejects.toThrow();
  });
});
