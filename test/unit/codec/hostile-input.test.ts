import { describe, expect, it } from 'vitest';
import { decodeRequest, decodeResult, encodeResult } from '../../../src/codec/index.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { buildResult } from '../../../src/runtime/result-builder.ts';

// Inputs that once escaped the decode path as something other than a FleetError naming the field,
// or produced an `invalid` answer our own result decoder refused.

function frameOf(headerJson: string, tail = 0): Buffer {
  const json = Buffer.from(headerJson);
  const start = (12 + json.byteLength + 7) & ~7;
  const frame = Buffer.alloc(start + tail);
  frame.write('NPUF', 0, 'latin1');
  frame.writeUInt8(1, 4);
  frame.writeUInt8(1, 5);
  frame.writeUInt32LE(json.byteLength, 8);
  json.copy(frame, 12);
  return frame;
}

function decodeError(bytes: Uint8Array): FleetError {
  try {
    decodeRequest(bytes);
  } catch (err) {
    if (err instanceof FleetError) return err;
    throw new Error(`decode threw ${(err as Error).name}: ${(err as Error).message}, not a FleetError`, { cause: err });
  }
  throw new Error('decode accepted the message');
}

const input = { name: 'a', dtype: 'uint8', shape: [1] } as const;

describe('hostile requests', () => {
  // JSON.parse builds this iteratively, but JSON.stringify (the meta size check) recurses: at a
  // few thousand levels it threw a RangeError with no field, no fix and no request identity.
  // (Written as text: building it with JSON.stringify would overflow in the test itself.)
  const withDeepMeta = (depth: number, tensor: object): string =>
    `{"id":"r1","model":"m","createdAt":1,"meta":{"k":${'['.repeat(depth)}${']'.repeat(depth)}},"inputs":[${JSON.stringify(tensor)}]}`;

  it.each([
    ['frame', () => frameOf(withDeepMeta(20_000, { ...input, byteLength: 1 }), 8)],
    ['json', () => Buffer.from(withDeepMeta(100_000, { ...input, data: 'AA==' }))],
  ])('%s: a deeply nested meta is refused naming meta, with the request identity', (_form, make) => {
    const err = decodeError(make());
    expect(err.code).toMatch(/INVALID_MESSAGE|LIMIT_EXCEEDED/);
    expect(err.details).toMatchObject({ field: 'meta', id: 'r1', model: 'm' });
    expect(err.message).toMatch(/meta/);
  });

  // The invalid answer carries the identity the decoder salvaged; it must be one a result may
  // carry, or the producer waiting for it cannot even decode it (id <= 128, model <= 64).
  it.each([
    ['an overlong id', { id: 'i'.repeat(200), model: 'm', createdAt: 1, inputs: [] }],
    ['an overlong model', { id: 'r1', model: 'm'.repeat(100), createdAt: 1, inputs: [] }],
  ])('the invalid result for %s decodes with our own result decoder', (_what, header) => {
    const err = decodeError(Buffer.from(JSON.stringify(header)));
    const id = typeof err.details.id === 'string' ? err.details.id : '';
    const model = typeof err.details.model === 'string' ? err.details.model : 'topic-model';
    const result = buildResult({ id, model }, { worker: 'w0', device: 0 }, { status: 'invalid', error: err, device: -1, nowMs: 5 });
    for (const encoding of ['binary', 'json'] as const) {
      expect(decodeResult(encodeResult(result, encoding))).toMatchObject({ status: 'invalid', error: { code: err.code } });
    }
  });
});
