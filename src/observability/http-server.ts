import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { FleetError } from '../errors/fleet-error.ts';
import type { FleetMetrics } from './metrics.ts';

/** A probe answers a boolean or `{ ready/healthy, reason }`; the reason is shown in the 503 body. */
export type ProbeResult = boolean | { ready: boolean; reason?: string } | { healthy: boolean; reason?: string };
export type Probe = () => ProbeResult;

export interface HealthServerOptions {
  /** 0 = ephemeral (the bound port is returned). */
  port: number;
  /** Default 0.0.0.0 so Prometheus and kubelet probes reach it. */
  host?: string;
  metrics: FleetMetrics;
  /** /readyz: may this worker take work now (device open, transport connected, not draining)? */
  isReady: Probe;
  /** /healthz: is the process loop alive (no hang past the limit)? Default: always healthy. */
  isHealthy?: Probe;
}

export interface HealthServer {
  readonly port: number;
  readonly host: string;
  close(): Promise<void>;
}

interface ProbeOutcome {
  ok: boolean;
  reason?: string;
}

function runProbe(probe: Probe): ProbeOutcome {
  let result: ProbeResult;
  try {
    result = probe();
  } catch (err) {
    return { ok: false, reason: `probe threw: ${err instanceof Error ? err.message : String(err)}` };
  }
  if (typeof result === 'boolean') return { ok: result };
  const ok = 'ready' in result ? result.ready : result.healthy;
  return result.reason === undefined ? { ok } : { ok, reason: result.reason };
}

function sendJson(res: ServerResponse, status: number, body: unknown, head: boolean): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  });
  res.end(head ? undefined : text);
}

function probeResponse(res: ServerResponse, probe: Probe, okWord: string, failWord: string, head: boolean): void {
  const outcome = runProbe(probe);
  const body: Record<string, unknown> = { status: outcome.ok ? okWord : failWord };
  if (outcome.reason !== undefined) body.reason = outcome.reason;
  sendJson(res, outcome.ok ? 200 : 503, body, head);
}

async function handle(req: IncomingMessage, res: ServerResponse, options: HealthServerOptions): Promise<void> {
  const path = (req.url ?? '/').split('?', 1)[0];
  const known = path === '/metrics' || path === '/healthz' || path === '/readyz';
  if (!known) {
    sendJson(res, 404, { error: 'not found', paths: ['/metrics', '/healthz', '/readyz'] }, req.method === 'HEAD');
    return;
  }
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('allow', 'GET, HEAD');
    sendJson(res, 405, { error: 'method not allowed' }, false);
    return;
  }
  const head = req.method === 'HEAD';
  if (path === '/healthz') {
    probeResponse(res, options.isHealthy ?? (() => true), 'ok', 'unhealthy', head);
    return;
  }
  if (path === '/readyz') {
    probeResponse(res, options.isReady, 'ready', 'not ready', head);
    return;
  }
  const text = await options.metrics.render();
  res.writeHead(200, {
    'content-type': options.metrics.contentType,
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  });
  res.end(head ? undefined : text);
}

/** Serves GET /metrics, /healthz, /readyz with node:http; resolves once listening. */
export async function startHealthServer(options: HealthServerOptions): Promise<HealthServer> {
  const host = options.host ?? '0.0.0.0';
  const server = createServer((req, res) => {
    handle(req, res, options).catch((err: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      sendJson(res, 500, { error: err instanceof Error ? err.message : String(err) }, false);
    });
  });
  // Probes and scrapes are tiny; a stuck client must not hold a socket open for long.
  server.requestTimeout = 10_000;
  server.headersTimeout = 10_000;

  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException): void => {
      reject(
        new FleetError('SERVICE_UNAVAILABLE', `metrics/health server cannot listen on ${host}:${options.port}: ${err.message}; choose another worker.metricsPort (worker N listens on metricsPort + N; 0 = any free port)`, {
          cause: err,
          details: { host, port: options.port, errno: err.code, fix: 'choose another worker.metricsPort (0 = ephemeral)' },
        }),
      );
    };
    server.once('error', onError);
    try {
      server.listen(options.port, host, () => {
        server.off('error', onError);
        resolve();
      });
    } catch (err) {
      // A port past 65535 (metricsPort + device index) throws here instead of emitting 'error'.
      server.off('error', onError);
      reject(
        new FleetError('INVALID_CONFIG', `metrics/health server cannot listen on port ${options.port}: ${(err as Error).message}; worker N listens on worker.metricsPort + N: lower worker.metricsPort (0 = any free port)`, {
          cause: err,
          details: { host, port: options.port, fix: 'lower worker.metricsPort (0 = ephemeral)' },
        }),
      );
    }
  });

  const port = (server.address() as AddressInfo).port;
  let closing: Promise<void> | undefined;
  return {
    port,
    host,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
