import type { RequestEnvelope } from '../../src/contracts/request-envelope.ts';

/** A priority-0 request for the example mlp-classifier (one [1, 64] float32 sample of zeros). */
export function mlpRequest(id: string, replyTo: string): RequestEnvelope {
  return { id, model: 'mlp-classifier', priority: 0, createdAt: Date.now(), replyTo, inputs: [{ name: 'input', dtype: 'float32', shape: [1, 64], data: new Uint8Array(64 * 4) }] };
}
