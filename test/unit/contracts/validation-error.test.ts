import { describe, expect, it } from 'vitest';
import { parseFleetConfig, parseModelConfig } from '../../../src/contracts/config-loader.ts';

function message(parse: () => unknown): string {
  try {
    parse();
  } catch (e) {
    return (e as Error).message;
  }
  return 'no error';
}

describe('validation error hints', () => {
  // A kind outside a discriminated union (transport.kind, versionPolicy.kind) got the catch-all
  // '(fix the value)', the one hint that does not say what to write.
  it('tells a bad or missing kind of a discriminated union which kinds there are', () => {
    expect(message(() => parseFleetConfig({ transport: { kind: 'rabbitmq' } }))).toMatch(/transport\.kind: .*\(use one of "memory", "kafka", "bullmq"\)$/);
    expect(message(() => parseFleetConfig({ transport: {} }))).toMatch(/transport\.kind: .*\(use one of "memory", "kafka", "bullmq"\)$/);
    const model = { name: 'm', inputs: [{ name: 'x', dtype: 'float32', dims: [-1, 4] }], outputs: [{ name: 'y', dtype: 'float32', dims: [-1, 2] }] };
    expect(message(() => parseModelConfig({ ...model, versionPolicy: { kind: 'newest' } }))).toMatch(/versionPolicy\.kind: .*\(use one of "latest", "specific"\)$/);
  });
});
