import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { SERVED_FRAME_MEMORY_MS } from '../../scheduler/stream-served.ts';
import { ErrorThrottle } from '../error-throttle.ts';
import type { TransportLogger } from '../kafka/kafka-client.ts';
import type { AnsweredFrame, FrameClaim, NewerFrame } from '../transport.ts';
import { withTimeout } from '../with-timeout.ts';

/**
 * How long a claim may take, waits for other settles of its streams included, before its frames
 * go out `ok` unchecked: the shared connection retries forever with Redis away, and results must
 * not wait on it for that. Also how long a stream's lease lasts when its holder never releases it
 * (a worker killed mid-settle): a claim waiting that long takes the stream over.
 */
export const FRAME_CLAIM_TIMEOUT_MS = 1_000;
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
}

/**
 * The fleet-wide newest answered frame of each stream (Transport.claimNewestFrames), kept in
 * Redis: each BullMQ worker's scheduler only remembers what it served itself, so worker A
 * answered frame 4 of a camera after worker B answered frame 5. A claim is one script call per
 * settle, whatever its frame count, and claims the frames its settle is about to publish. The
 * check alone left a window: A claims 4, B claims 5 and publishes, then A publishes 4 (a drill
 * of two workers in one process saw 1-10 of ~500 ok results out of order). So a claim also leases
 * its streams to its settle until the settle releases them, published; a later claim of a newer
 * frame of such a stream waits for that (a few ms), an older one is refused at once. A mark lives
 * SERVED_FRAME_MEMORY_MS past the last frame that set it, as the scheduler's memory does:
 * createdAt is the producer's clock, so a camera moved to a host whose clock is behind loses at
 * most that long, and Redis keeps only marks of live streams.
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
    const startedAt = Date.now();
    try {
      for (let attempt = 0; ; attempt++) {
        const takeOver = Date.now() - startedAt >= timeoutMs;
        const script = (await this.o.redis()).eval(CLAIM_NEWEST_FRAMES, keys.length, ...keys, String(SERVED_FRAME_MEMORY_MS), String(timeoutMs), token, takeOver ? '1' : '0', ...args);
        const reply = await withTimeout(script, timeoutMs, 'claiming stream frames in Redis');
        if (reply !== 0) return { newer: parseMarks(reply, frames.length), release: () => this.release(keys.filter((_, i) => i % 2 === 1), token) };
        await new Promise((r) => setTimeout(r, WAIT_STEPS_MS[Math.min(attempt, WAIT_STEPS_MS.length - 1)]));
      }
    } catch (err) {
      this.warn(err, frames.length);
      return { newer: frames.map(() => undefined), release: () => {} };
    }
  }

  /** Not awaited by the settle: its results are out; a claim waiting on these leases retries meanwhile. */
  private release(leases: readonly string[], token: string): void {
    const released = this.o.redis().then((redis) => redis.eval(RELEASE_LEASES, leases.length, ...leases, token));
    withTimeout(released, FRAME_CLAIM_TIMEOUT_MS, 'releasing stream leases in Redis').catch((err: unknown) => this.warn(err, leases.length));
  }

  private warn(err: unknown, frames: number): void {
    const { log, heldBack } = this.errors.note(Date.now());
    if (!log) return;
    this.o.logger?.warn(
      { err, frames, heldBack },
      'could not keep the order of stream frames in Redis; answering them ok unchecked (a camera\'s results may come out of frame order meanwhile)',
    );
  }
}

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
