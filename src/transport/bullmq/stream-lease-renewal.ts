import type { Redis } from 'ioredis';
import { withTimeout } from '../with-timeout.ts';

/**
 * KEYS: leases; ARGV[1]: the settle's token, ARGV[2]: how long a lease lives (ms). Extends those
 * still this settle's; returns per lease 1 (renewed) or 0 (lapsed, or another settle's now).
 */
export const RENEW_LEASES = `
local out = {}
for i = 1, #KEYS do
  out[i] = 0
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    out[i] = 1
  end
end
return out
`;

export interface StreamLeaseRenewalOptions {
  readonly redis: () => Promise<Redis>;
  /** The leases the claim took (each once). */
  readonly leases: readonly string[];
  readonly token: string;
  /** How long a lease lives past its last renewal. */
  readonly leaseMs: number;
  /** When the claim that set the leases was sent: their life counts from then at the latest. */
  readonly claimedAt: number;
  /** Renewing stops this long after the claim: see FRAME_LEASE_HOLD_MAX_MS. */
  readonly holdMaxMs: number;
  /** A renewal failed, or found leases no longer this settle's (lapsed, or taken over). */
  readonly onTrouble: (err: unknown, lost: number) => void;
}

/**
 * Keeps a settle's stream leases alive from its claim until its release, so a live holder whose
 * publish is slow keeps its streams: a lease that only lasted FRAME_CLAIM_TIMEOUT_MS lapsed under
 * a publish slower than that (a host at load 10-12), a newer frame's claim took the stream over and
 * went out first (`frames`, 2 workers: out of order 1 in 2 of 4 runs). Renewed every third of a
 * lease's life, so a renewal may come two thirds late before the lease lapses; a holder that dies
 * stops renewing and its leases lapse a lease's life later. Each renewal is sent once the one
 * before it has answered, never piled up on a slow Redis. JS thread only.
 */
export class StreamLeaseRenewal {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Those still this settle's as far as the last renewal saw. */
  private leases: readonly string[];

  constructor(private readonly o: StreamLeaseRenewalOptions) {
    this.leases = o.leases;
    // All its frames refused, a settle holds no lease.
    if (o.leases.length > 0) this.schedule(o.claimedAt);
  }

  /** The settle released its streams: no renewal is sent after this. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(lastSentAt: number): void {
    if (this.stopped) return;
    const next = lastSentAt + this.o.leaseMs / 3;
    // A settle holding its streams this long is stuck: waiting claims take them over anyway.
    if (next >= this.o.claimedAt + this.o.holdMaxMs) return this.stop();
    this.timer = setTimeout(() => void this.renew(), Math.max(0, next - Date.now()));
    this.timer.unref();
  }

  private async renew(): Promise<void> {
    const sentAt = Date.now();
    const { token, leaseMs } = this.o;
    const leases = this.leases;
    try {
      const renewed = this.o.redis().then((redis) => redis.eval(RENEW_LEASES, leases.length, ...leases, token, String(leaseMs)));
      const reply = await withTimeout(renewed, leaseMs, 'renewing stream leases in Redis');
      if (!Array.isArray(reply) || reply.length !== leases.length) throw new Error(`unexpected reply of the lease renewal script: ${JSON.stringify(reply)}`);
      if (this.stopped) return;
      const kept = leases.filter((_, i) => reply[i] === 1);
      if (kept.length < leases.length) {
        // Not renewed again: a lease lost is another settle's, or free for the next claim.
        this.leases = kept;
        const lost = leases.length - kept.length;
        this.o.onTrouble(new Error(`${lost} of ${leases.length} stream leases were no longer this settle's when renewed (lapsed, or taken over)`), lost);
        if (kept.length === 0) return this.stop();
      }
    } catch (err) {
      if (!this.stopped) this.o.onTrouble(err, 0);
    }
    this.schedule(sentAt);
  }
}
