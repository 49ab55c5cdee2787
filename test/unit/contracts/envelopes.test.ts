import { describe, expect, it } from 'vitest';
import { decodeRequest } from '../../../src/codec/index.ts';
import type { FleetError } from '../../../src/errors/fleet-error.ts';
import { fleetErrorOf } from '../../helpers/fleet-error-of.ts';

const good = { id: 'r1', model: 'mlp', createdAt: 1_700_000_000_000, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 1], data: 'AACAPw==' }] };

function errorOf(value: unknown): FleetError {
  return fleetErrorOf(() => decodeRequest(Buffer.from(JSON.stringify(value))));
}

describe('request envelope validation', () => {
  it('accepts a good request', () => {
    const r = decodeRequest(Buffer.from(JSON.stringify(good)));
    expect(r.inputs[0]?.data).toEqual(new Uint8Array([0, 0, 0x80, 0x3f]));
  });

  it.each([
    [{ ...good, model: '-bad' }, 'model', /model must match/],
    [{ ...good, priority: -1 }, 'priority', /priority must be >= 0/],
    [{ ...good, deadlineAt: 'soon' }, 'deadlineAt', /set it to a number/],
    [{ ...good, inputs: [{ ...good.inputs[0], dtype: 'float64' }] }, 'inputs[0].dtype', /use one of "float32"/],
    [{ ...good, inputs: [{ ...good.inputs[0], shape: [] }] }, 'inputs[0].shape', /at least the leading batch/],
    [{ ...good, inputs: [{ ...good.inputs[0], shape: [2, 1] }] }, 'inputs[0].data', /needs 8/],
    [{ ...good, id: '' }, 'id', /id must not be empty/],
    [{ ...good, createdAt: undefined }, 'createdAt', /createdAt/],
  ])('names the bad field %#', (value, field, message) => {
    const err = errorOf(value);
    expect(err.code).toBe('INVALID_MESSAGE');
    expect(err.retriable).toBe(false);
    expect(err.details.field).toBe(field);
    expect(err.message).toMatch(message);
  });

  // Node's decoder also takes the base64url characters '-' and '_' (they decode to full length), so
  // long tensors in base64url were accepted while short ones were refused.
  it.each(['!', '-', '_'])('rejects the bad base64 character %j in long tensors too', (char) => {
    const n = 8192;
    const data = Buffer.alloc(n * 4).toString('base64');
    const bad = data.slice(0, 100) + char + data.slice(101);
    const err = errorOf({ ...good, inputs: [{ name: 'input', dtype: 'float32', shape: [1, n], data: bad }] });
    expect(err.details.field).toBe('inputs[0].data');
    expect(err.message).toMatch(/base64/);
  });

  it('keeps the identity of an invalid message so its result can be routed', () => {
    const err = errorOf({ ...good, replyTo: 'my.replies', priority: 99 });
    expect(err.details).toMatchObject({ id: 'r1', model: 'mlp', replyTo: 'my.replies', field: 'priority' });
  });
});

describe('request ids travel as UTF-8', () => {
  // Kafka keys, BullMQ job ids (Redis) and headers carry the id as UTF-8, where every lone
  // surrogate becomes U+FFFD: two distinct ids would become one job id, and BullMQ drops the second
  // request as a duplicate.
  it('refuses an id with a lone surrogate, naming id and the fix', () => {
    expect(Buffer.from('r\ud800').equals(Buffer.from('r\udbff'))).toBe(true);
    for (const id of ['r\ud800', '\udc00r', 'r\ude00\ud83d']) {
      const err = errorOf({ ...good, id });
      expect(err.details.field).toBe('id');
      expect(err.message).toMatch(/id: .*surrogate/);
    }
  });

  it('accepts ids with characters outside the BMP', () => {
    expect(decodeRequest(Buffer.from(JSON.stringify({ ...good, id: 'r\ud83d\ude00' }))).id).toBe('r😀');
  });
});
