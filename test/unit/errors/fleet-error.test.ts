import { describe, expect, it } from 'vitest';
import { FleetError } from '../../../src/errors/fleet-error.ts';

describe('FleetError', () => {
  it('carries a stable code, retriable default by code, and the cause', () => {
    const cause = new Error('socket closed');
    const e = new FleetError('TRANSPORT_ERROR', 'publish failed', { cause });
    expect(e.code).toBe('TRANSPORT_ERROR');
    expect(e.retriable).toBe(true);
    expect(e.cause).toBe(cause);
    expect(new FleetError('INVALID_MESSAGE', 'x').retriable).toBe(false);
    expect(new FleetError('INVALID_MESSAGE', 'x', { retriable: true }).retriable).toBe(true);
    expect(e.toResultError()).toEqual({ code: 'TRANSPORT_ERROR', message: 'publish failed' });
  });

  it('wraps foreign errors', () => {
    const wrapped = FleetError.from(new TypeError('boom'), 'DEVICE_ERROR');
    expect(FleetError.is(wrapped, 'DEVICE_ERROR')).toBe(true);
    expect(wrapped.message).toBe('boom');
    expect(FleetError.from(wrapped)).toBe(wrapped);
  });
});
