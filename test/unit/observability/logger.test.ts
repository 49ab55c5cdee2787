import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { loadFleetConfig } from '../../../src/contracts/config-loader.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
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

  it('an error whose message already quotes its cause logs that text once; a cause it does not quote is still added', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const log = createLogger({ level: 'info', destination: sink });
    const acl = new Error('aclmdlLoadFromFile failed: 100012 ACL_ERROR_DESERIALIZE_MODEL');
    // As toFleetError words a binding failure: the cause's text is already in the message.
    log.warn({ err: new FleetError('MODEL_LOAD_FAILED', `loadModel: ${acl.message}`, { cause: acl }) }, 'quoted');
    // A wrapper that does not quote its cause, whose cause has one it does not quote either.
    log.warn({ err: new Error('starting failed', { cause: new Error('socket closed', { cause: new Error('ECONNRESET') }) }) }, 'unquoted');
    const [quoted, unquoted] = lines.map((l) => (JSON.parse(l) as { err: { message: string; stack: string } }).err);
    expect(quoted?.message).toBe('loadModel: aclmdlLoadFromFile failed: 100012 ACL_ERROR_DESERIALIZE_MODEL');
    expect(unquoted?.message).toBe('starting failed: socket closed: ECONNRESET');
    // The stack still shows the chain, cause by cause.
    expect(quoted?.stack).toMatch(/caused by: Error: aclmdlLoadFromFile failed/);
  });
});
