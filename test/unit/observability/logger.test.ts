import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
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
});
