import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { SERVED_FRAME_MEMORY_MS } from '../../scheduler/stream-served.ts';
import { ErrorThrottle } from '../error-throttle.ts';
import type { TransportLogger } from '../kafka/kafka-client.ts';
import type { AnsweredFrame, FrameClaim, NewerFrame } from '../transport.ts';
import { withTimeout } from '../with-timeout.ts';
import { StreamLeaseRenewal } from './stream-lease-renewal.ts';

/**
 * How long one claim call may wait for Redis before its frames go out `ok` unchecked: the shared
 * connection retries forever with Redis away, and results must not wait on it for that. Also how
 * long a stream's lease lasts past its holder's last renewal (StreamLeaseRenewal): a worker killed
 * mid-settle leaves its streams to the next claim that long after.
 */
export const FRAME_CLAIM_TIMEOUT_MS = 1_000;
/**
 * How long a claim waits for a settle that holds one of its streams and keeps renewing the lease
 * before it takes the stream over anyway (logged). A live holder renews until it has published,
 * which takes a few ms, over 1 s on a host at load 10-12; 10 s of it means that worker or Redis is
 * in trouble, and the waiting frames' results (ok, or SUPERSEDED if a newer one got in meanwhile)
 * must not wait on it longer. The holder stops renewing then too.
 */
export const FRAME_LEASE_HOLD_MAX_MS = 10_000;
/** Pauses between claims waiting for another settle of a stream to publish: short, as settles are. */
const WAIT_STEPS_MS = [1, 2, 4, 8, 16];

/**
 * ARGV[1]: how long a mark lives (ms), ARGV[2]: how long a lease lives (ms), ARGV[3]: the claiming
 * settle's token, ARGV[4]: "1" to take over leases of others (waited long enough). Frame i:
 * KEYS[2i-1] its stream's mark ("<frameAt> <request id>" of the newest frame claimed), KEYS[2i]
 * its stream's lease (the token of the settle publishing it), ARGV[3+2i] its frameAt, ARGV[4+2i]
 * its request id. Returns 0, changing nothing, when some frame not older than its mark has a
 * lease of another settle (that settle's results are not out yet: publishing now could overtake
 * them); else per frame "" (claimed: the newest now, leased to this settle) or the mark of the
 * newer frame. A tie is claimed: the same frame answered again (a duplicate, a redelivery).
 */
export const CLAIM_NEWEST_FRAMES = `
local function markedAt(mark)
  local space = mark and string.find(mark, ' ', 1, true)
  if not space then return nil end
  return tonumber(string.sub(mark, 1, space - 1))
end
local n = #KEYS / 2
if ARGV[4] ~= '1' then
  for i = 1, n do
    local m = markedAt(redis.call('GET', KEYS[2 * i - 1]))
    if not (m and m > tonumber(ARGV[3 + 2 * i])) then
      local lease = redis.call('GET', KEYS[2 * i])
      if lease and lease ~= ARGV[3] then return 0 end
    end
  end
end
local out = {}
for i = 1, n do
  local mark = redis.call('GET', KEYS[2 * i - 1])
  local m = markedAt(mark)
  if m and m > tonumber(ARGV[3 + 2 * i]) then
    out[i] = mark
  else
    redis.call('SET', KEYS[2 * i - 1], ARGV[3 + 2 * i] .. ' ' .. ARGV[4 + 2 * i], 'PX', ARGV[1])
    redis.call('SET', KEYS[2 * i], ARGV[3], 'PX', ARGV[2])
    out[i] = ''
  end
end
return out
`;

/** KEYS: leases; ARGV[1]: the settle's token. Drops those still this settle's. */
export const RELEASE_LEASES = `
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then redis.call('DEL', KEYS[i]) end
end
return 0
`;

export interface StreamFrameMarksOptions {
  /** The transport's shared connection; rejects once the transport is closed. */
  readonly redis: () => Promise<Redis>;
  /** The keys of `streamKey` of `model`, `kind` mark or lease (under the transport's prefix and the model's queue). */
  readonly key: (model: string, streamKey: string, kind: 'mark' | 'lease') => string;
  readonly logger?: TransportLogger | undefined;
  /** @defaultValue FRAME_CLAIM_TIMEOUT_MS */
  readonly timeoutMs?: number;
  /** @defaultValue FRAME_LEASE_HOLD_MAX_MS */
  readonly holdMaxMs?: number;
}

/**
 * The fleet-wide newest answered frame of each stream (Transport.claimNewestFrames), kept in
 * Redis: each BullMQ worker's scheduler only remembers what it served itself, so worker A
 * answered frame 4 of a camera after worker B answered frame 5. A claim is one script call per
 * settle, whatever its frame count, and claims the frames its settle is about to publish. The
 * check alone left a window: A claims 4, B claims 5 and publishes, then A publishes 4 (a drill
 * of two workers in one process saw 1-10 of ~500 ok results out of order). So a claim also leases
 * its streams to its settle until the settle releases them, published, renewing the leases
 * meanwhile (a publish can outlast a lease); a later claim of a newer frame of such a stream waits
 * for that (a few ms), or for the lease to lapse (its holder died), or FRAME_LEASE_HOLD_MAX_MS; an
 * older one is refused at once. A mark lives SERVED_FRAME_MEMORY_MS past the last frame that set
 * it, as the scheduler's memory does: createdAt is the producer's clock, so a camera moved to a
 * host whose clock is behind loses at most that long, and Redis keeps only marks of live streams.
 */
export class StreamFrameMarks {
  private readonly errors = new ErrorThrottle();
  private readonly tokenPrefix = randomUUID();
  private settles = 0;

  constructor(private readonly o: StreamFrameMarksOptions) {}

  async claim(frames: readonly AnsweredFrame[]): Promise<FrameClaim> {
    if (frames.length === 0) return { newer: [], release: () => {} };
    const token = `${this.tokenPrefix}:${++this.settles}`;
    const keys = frames.flatMap((f) => [this.o.key(f.model, f.streamKey, 'mark'), this.o.key(f.model, f.streamKey, 'lease')]);
    const args = frames.flatMap((f) => [String(f.frameAt), f.requestId]);
    const timeoutMs = this.o.timeoutMs ?? FRAME_CLAIM_TIMEOUT_MS;
    const holdMaxMs = this.o.holdMaxMs ?? FRAME_LEASE_HOLD_MAX_MS;
    const startedAt = Date.now();
    try {
      for (let attempt = 0; ; attempt++) {
        const sentAt = Date.now();
        const takeOver = sentAt - startedAt >= holdMaxMs;
        const script = (await this.o.redis()).eval(CLAIM_NEWEST_FRAMES, keys.length, ...keys, String(SERVED_FRAME_MEMORY_MS), String(timeoutMs), token, takeOver ? '1' : '0', ...args);
        const reply = await withTimeout(script, timeoutMs, 'claiming stream frames in Redis');
        if (reply === 0) {
          await new Promise((r) => setTimeout(r, WAIT_STEPS_MS[Math.min(attempt, WAIT_STEPS_MS.length - 1)]));
          continue;
        }
        const newer = parseMarks(reply, frames.length);
        if (takeOver) this.warn(`a settle held a stream over ${holdMaxMs} ms, renewing its lease; took a stream over from it (that worker or Redis is in trouble; a camera's results may come out of frame order)`, { frames: frames.length });
        const leases = [...new Set(frames.flatMap((f, i) => (newer[i] === undefined ? [keys[2 * i + 1] as string] : [])))];
        const renewal = new StreamLeaseRenewal({
          redis: this.o.redis,
          leases,
          token,
          leaseMs: timeoutMs,
          claimedAt: sentAt,
          holdMaxMs,
          onTrouble: (err, lost) => this.warn(RENEWAL_TROUBLE, { err, leases: leases.length, lost }),
        });
        return {
          newer,
          release: () => {
            renewal.stop();
            this.release(keys.filter((_, i) => i % 2 === 1), token);
          },
        };
      }
    } catch (err) {
      this.warn(UNCHECKED, { err, frames: frames.length });
      return { newer: frames.map(() => undefined), release: () => {} };
    }
  }

  /** Not awaited by the settle: its results are out; a claim waiting on these leases retries meanwhile. */
  private release(leases: readonly string[], token: string): void {
    const released = this.o.redis().then((redis) => redis.eval(RELEASE_LEASES, leases.length, ...leases, token));
    withTimeout(released, FRAME_CLAIM_TIMEOUT_MS, 'releasing stream leases in Redis').catch((err: unknown) => this.warn(UNCHECKED, { err, frames: leases.length }));
  }

  /** One line for all the troubles of the frame order, at most every 10 s. */
  private warn(msg: string, fields: Record<string, unknown>): void {
    const { log, heldBack } = this.errors.note(Date.now());
    if (log) this.o.logger?.warn({ ...fields, heldBack }, msg);
  }
}

const UNCHECKED = 'could not keep the order of stream frames in Redis; answering them ok unchecked (a camera\'s results may come out of frame order meanwhile)';
const RENEWAL_TROUBLE =
  'could not renew the stream leases of a settle publishing in Redis; a newer frame of its cameras may take them over and go out first (a camera\'s results may come out of frame order)';

/** The claim's reply: per frame, undefined when claimed, else the newer frame its mark names. */
export function parseMarks(reply: unknown, count: number): Array<NewerFrame | undefined> {
  if (!Array.isArray(reply) || reply.length !== count) throw new Error(`unexpected reply of the frame claim script: ${JSON.stringify(reply)}`);
  return reply.map((mark: unknown) => {
    if (typeof mark !== 'string' || mark === '') return undefined;
    const space = mark.indexOf(' ');
    const frameAt = Number(mark.slice(0, space));
    return space < 0 || !Number.isFinite(frameAt) ? undefined : { frameAt, requestId: mark.slice(space + 1) };
  });
}
