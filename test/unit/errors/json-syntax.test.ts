import { describe, expect, it } from 'vitest';
import { decodeRequest, encodeRequest } from '../../../src/codec/index.ts';
import { jsonSyntaxError, withoutJsonQuote } from '../../../src/errors/json-syntax.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';

function parseError(text: string): unknown {
  try {
    JSON.parse(text);
  } catch (err) {
    return err;
  }
  throw new Error(`${text} parsed`);
}

describe('jsonSyntaxError', () => {
  it("drops V8's quote of the text around the bad token, keeping the rest", () => {
    expect(jsonSyntaxError(parseError('PAYLOADBYTES-RAW')).message).toBe("Unexpected token 'P'");
    expect(jsonSyntaxError(parseError('{"id":"a","meta":{"note":SENTINEL-META}}')).message).toBe("Unexpected token 'S'");
    expect(jsonSyntaxError(parseError('undefined')).message).toBe('not valid JSON');
  });

  it('withoutJsonQuote: a stored message (a dead letter written before the codec dropped the quote) loses it too', () => {
    expect(withoutJsonQuote('message is neither an npu-fleet frame nor valid JSON: Unexpected token \'S\', ...":{"note":SENTINEL-M"... is not valid JSON')).toBe(
      "message is neither an npu-fleet frame nor valid JSON: Unexpected token 'S'",
    );
    expect(withoutJsonQuote('inputs[0].name: "x" is not an input of m (inputs: input)')).toBe('inputs[0].name: "x" is not an input of m (inputs: input)');
  });

  it('leaves messages that quote nothing as they are', () => {
    const err = parseError('{"a": 1} x');
    expect(jsonSyntaxError(err)).toBe(err);
    expect(jsonSyntaxError(parseError('{')).message).toBe("Expected property name or '}' in JSON at position 1");
  });

  it('a request whose JSON breaks inside meta, as JSON or in a binary frame header: neither the error nor its cause quotes it', () => {
    const json = Buffer.from('{"id":"r1","model":"m","meta":{"note":SENTINEL-META}}');
    const request = { id: 'r1', model: 'm', priority: 0, createdAt: 1, inputs: [], meta: { note: 'SENTINEL-META' } };
    const frame = Buffer.from(encodeRequest(request, 'binary'));
    const at = frame.indexOf(':"SENTINEL');
    expect(at).toBeGreaterThan(0);
    frame.write(': ', at, 'latin1'); // same length; the value loses its opening quote
    for (const [bytes, what] of [
      [json, 'message is neither an npu-fleet frame nor valid JSON'],
      [frame, 'frame header is not valid JSON'],
    ] as const) {
      let err: unknown;
      try {
        decodeRequest(bytes);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(FleetError);
      expect((err as FleetError).message).toBe(`${what}: Unexpected token 'S'`);
      expect(String((err as FleetError).cause)).not.toContain('SENTINEL');
    }
  });
});
