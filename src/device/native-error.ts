import type { ErrorCode } from '../errors/fleet-error.ts';
import { FleetError } from '../errors/fleet-error.ts';

/** What the binding attaches to the Errors it rejects with (native/src/binding.cc MakeError). */
interface NativeErrorShape {
  message: string;
  kind?: 'acl' | 'closed' | 'invalid' | 'internal' | 'load';
  aclError?: number;
  aclCode?: string;
  aclMessage?: string;
  api?: string;
}

const OUT_OF_MEMORY = new Set([200000, 207001, 207018, 245000, 245002, 300000]);
const UNKNOWN_DEVICE = new Set([107001, 200002, 207004]);
const TIMEOUT = new Set([107019, 107020, 207020, 507012, 507014, 507017, 507046, 507047, 545601]);
const BAD_ARGUMENT = new Set([100000, 100017, 100018, 107000, 145000, 145013, 145021]);

function codeForAcl(aclError: number, op: string, text: string): ErrorCode {
  if (OUT_OF_MEMORY.has(aclError)) return 'DEVICE_OUT_OF_MEMORY';
  if (UNKNOWN_DEVICE.has(aclError)) return 'INVALID_ARGUMENT';
  if (TIMEOUT.has(aclError)) return 'DEVICE_TIMEOUT';
  if (op === 'loadModel') return /unsupported op/i.test(text) ? 'UNSUPPORTED_OP' : 'MODEL_LOAD_FAILED';
  if (BAD_ARGUMENT.has(aclError)) return 'INVALID_ARGUMENT';
  return 'DEVICE_ERROR';
}

/**
 * Turns a rejection from the binding into the one FleetError class. ACL failures keep the numeric
 * aclError, its symbolic name and aclGetRecentErrMsg() text (read on the device thread) in details.
 */
export function toFleetError(error: unknown, op: string, context: Record<string, unknown> = {}): FleetError {
  if (error instanceof FleetError) return error;
  if (!(error instanceof Error)) return new FleetError('INTERNAL', `${op}: ${String(error)}`, { cause: error, details: context });
  const e = error as Error & NativeErrorShape;
  const details: Record<string, unknown> = { ...context, op };
  let code: ErrorCode;
  switch (e.kind) {
    case 'acl': {
      details['aclError'] = e.aclError;
      details['aclCode'] = e.aclCode;
      details['aclMessage'] = e.aclMessage;
      details['api'] = e.api;
      code = codeForAcl(e.aclError ?? -1, op, `${e.message} ${e.aclMessage ?? ''}`);
      break;
    }
    case 'closed':
      code = 'CLOSED';
      break;
    case 'invalid':
      code = op === 'loadModel' ? 'MODEL_LOAD_FAILED' : 'INVALID_ARGUMENT';
      break;
    case 'load':
      code = 'NATIVE_LOAD_FAILED';
      break;
    default:
      code = error instanceof TypeError || error instanceof RangeError ? 'INVALID_ARGUMENT' : 'INTERNAL';
  }
  return new FleetError(code, `${op}: ${e.message}`, { cause: error, details });
}
