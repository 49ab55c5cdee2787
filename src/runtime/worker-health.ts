import type { FleetError } from '../errors/fleet-error.ts';

export type WorkerState = 'starting' | 'running' | 'draining' | 'stopped' | 'hung' | 'failed';

/** What readiness and liveness are judged on: the worker's state, its broker, its device. */
export interface HealthInputs {
  readonly state: WorkerState;
  readonly brokerConnected: boolean;
  /** Why the broker counts as not connected, if the transport says (Transport.unreadyReason). */
  readonly brokerUnreadyReason?: string | undefined;
  /** The run of failed batches the device is in (BatchRunner.deviceFailing), if any. */
  readonly failing: { readonly batches: number; readonly error: FleetError; readonly sinceMs: number } | undefined;
  readonly hangLimitMs: number;
}

/**
 * For /readyz and the ready gauge: running, its broker answering as far as the client knows, and
 * its device not failing every batch (a lost device would answer every request failed).
 */
export function workerReadiness(h: HealthInputs): { ready: true } | { ready: false; reason: string } {
  if (h.state !== 'running') return { ready: false, reason: h.state };
  if (!h.brokerConnected) return { ready: false, reason: h.brokerUnreadyReason ?? 'broker unreachable' };
  const failing = h.failing;
  if (failing !== undefined) {
    return { ready: false, reason: `device failing: the last ${failing.batches} batches failed (${failing.error.code}: ${failing.error.message})` };
  }
  return { ready: true };
}

/**
 * For /healthz (liveness): does this process need a restart? After a device hang or a transport
 * lost for good, and once the device has failed every batch for worker.hangLimitMs: only a new
 * process resets the device, and until then every request it takes is answered failed.
 */
export function workerHealth(h: HealthInputs, nowMs: number): { healthy: true } | { healthy: false; reason: string } {
  if (h.state === 'hung' || h.state === 'failed') return { healthy: false, reason: h.state };
  const failing = h.failing;
  if (failing !== undefined && nowMs - failing.sinceMs >= h.hangLimitMs) {
    return {
      healthy: false,
      reason: `device failing for ${nowMs - failing.sinceMs} ms (worker.hangLimitMs ${h.hangLimitMs}): the last ${failing.batches} batches failed (${failing.error.code}: ${failing.error.message})`,
    };
  }
  return { healthy: true };
}
