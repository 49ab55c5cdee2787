import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { loadFleetConfig } from '../../../src/contracts/config-loader.ts';
import { childLogger, createLogger } from '../../../src/observability/logger.ts';

describe('logger', () => {
  it('binds component/device/model and never writes payloads', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const log = childLogger(createLogger({ level: 'info', destination: sink }), { component: 'worker', device: 1, model: 'mlp' });
    log.info({ request: { id: 'r1', inputs: [{ data: 'SECRET-BYTES' }] }, body: 'SECRET-BODY', meta: { user: 'SECRET' } }, 'got');
    const rec = JSON.parse(lines[0] ?? '{}') as Record<string, unknown>;
    expect(rec).toMatchObject({ component: 'worker', device: 1, model: 'mlp', msg: 'got' });
    expect(lines.join('')).not.toContain('SECRET');
  });

  it('takes NPU_FLEET_LOG_LEVEL (set by worker.yaml and docker-compose.yml) when the fleet config sets no level', () => {
    const before = process.env.NPU_FLEET_LOG_LEVEL;
    process.env.NPU_FLEET_LOG_LEVEL = 'debug';
    try {
      // As the worker and start commands make their logger.
      expect(createLogger({ level: loadFleetConfig({ env: {} }).log.level }).level).toBe('debug');
      // The config's own level, from its file or NPU_FLEET__LOG__LEVEL, still wins.
      expect(createLogger({ level: loadFleetConfig({ env: { NPU_FLEET__LOG__LEVEL: 'warn' } }).log.level }).level).toBe('warn');
    } finally {
      if (before === undefined) delete process.env.NPU_FLEET_LOG_LEVEL;
      else process.env.NPU_FLEET_LOG_LEVEL = before;
    }
    expect(createLogger({ level: loadFleetConfig({ env: {} }).log.level }).level).toBe('info');
  });
});
