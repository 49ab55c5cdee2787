import { createHash } from 'node:crypto';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';

/**
 * The job option holding the digest of what a request asks (see inputDigest). BullMQ keeps options
 * it does not know in the job's `opts`, and keeps `opts` when the worker trims an answered job's
 * large input (answered-inputs.ts), so the digest outlives the input it stands for.
 */
export const INPUT_DIGEST_OPTION = 'npuFleetInput';

/**
 * SHA-256 (base64url) of what decides a request's answer: its model, pinned version and input
 * tensors (names, dtypes, shapes, bytes). Not its id, priority, deadline, replyTo or meta: two
 * requests with one digest get the same outputs, so one's answer may stand for the other's.
 */
export function inputDigest(request: Pick<RequestEnvelope, 'model' | 'version' | 'inputs'>): string {
  const hash = createHash('sha256');
  // The header carries every length, so no two different requests feed the hash the same bytes.
  hash.update(JSON.stringify([request.model, request.version ?? null, request.inputs.map((t) => [t.name, t.dtype, t.shape, t.data.byteLength])]));
  for (const t of request.inputs) hash.update(t.data);
  return hash.digest('base64url');
}
