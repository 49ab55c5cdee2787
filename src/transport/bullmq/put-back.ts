import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { FleetError } from '../../errors/fleet-error.ts';

/**
 * Why not BullMQ's Job.moveToWait: it puts a prioritized job back at score priority × 2^32, the
 * same for every job put back, ahead of the jobs never fetched (their scores are that plus
 * BullMQ's insertion counter, 1 and up). Redis orders equal scores by member, so jobs put back
 * were served in the order of their ids, not the order they were added in: 'x', 'y', 'z' for z,
 * y, x added in that order. There is no way back to the counter a job had: the fetch pops it
 * with the job's score, and BullMQ keeps it nowhere else.
 *
 * Here a job goes back into the same front band, [priority × 2^32, priority × 2^32 + 1), ahead
 * of every job never fetched (each was added after it: a fetch takes the front job, and a
 * counter that BullMQ resets when the set empties starts again at 1), and within the band at its
 * place by an order key kept in the job's hash: when it was added (its timestamp, the producer's
 * clock), then when it was first fetched (processedOn, the worker's clock), then this process's
 * fetch sequence. The band's scores are fractions: one step past its last (or before its first)
 * member, else half way between the neighbours; when no double fits there, the band is spaced
 * out again. Jobs in the band without a key (put back by BullMQ itself, at the band's bottom) are
 * compared by the same fields, without the sequence. Past about 2^15 jobs waiting in one band
 * the spacing runs out of doubles and equal scores fall back to id order. The same placement
 * serves jobs BullMQ's stalled check pushed on the wait list (placeStalled). What this cannot
 * reach: docs/topics-and-queues.md ("BullMQ: jobs handed back").
 */
const PUT_BACK = `
local rcall = redis.call
local activeKey, waitKey, stalledKey, metaKey, prioritizedKey, markerKey, eventsKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local jobId, token, jobKey, seq, orderField, stalled = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6] == "stalled"
-- The smallest step every band can take: a double near 16 x 2^32 (fleet priority 15) resolves 2^-16.
local STEP = 1 / 65536

if rcall("EXISTS", jobKey) == 0 then return -1 end
local priority = tonumber(rcall("HGET", jobKey, "priority")) or 0
if stalled then
  -- Put on the wait list by BullMQ's stalled check: taken from there unless fetched meanwhile, or
  -- failed on its next fetch anyway (stalled too often: no device time, so no place to keep).
  if priority == 0 or rcall("HEXISTS", jobKey, "defa") == 1 then return 0 end
  if rcall("LREM", waitKey, 1, jobId) == 0 then return 0 end
else
  if token ~= "0" then
    local lockKey = jobKey .. ":lock"
    local lockToken = rcall("GET", lockKey)
    if lockToken ~= token then
      if lockToken then return -6 end
      return -2
    end
    rcall("DEL", lockKey)
    rcall("SREM", stalledKey, jobId)
  end
  if rcall("LREM", activeKey, 1, jobId) == 0 then return 0 end
end

local meta = rcall("HMGET", metaKey, "paused", "concurrency", "opts.maxLenEvents")
local pausedOrMaxed = meta[1] ~= false or (meta[2] ~= false and rcall("LLEN", activeKey) >= tonumber(meta[2]))

local function orderOf(key, s)
  local f = rcall("HMGET", key, "timestamp", "processedOn")
  return string.format("%016.0f%016.0f%016.0f", tonumber(f[1]) or 0, tonumber(f[2]) or 0, s)
end

if priority > 0 then
  local order = rcall("HGET", jobKey, orderField)
  if not order then
    order = orderOf(jobKey, seq)
    rcall("HSET", jobKey, orderField, order)
  end
  local base = priority * 0x100000000
  local top = base + 1
  local function fmt(x) return string.format("%.17g", x) end
  local prefix = string.sub(jobKey, 1, #jobKey - #jobId)
  -- The band by rank (O(log n) each): ranks r0 .. r0 + n - 1.
  local r0 = rcall("ZCOUNT", prioritizedKey, "-inf", "(" .. fmt(base))
  local n = rcall("ZCOUNT", prioritizedKey, fmt(base), "(" .. fmt(top))
  local function member(i)
    local m = rcall("ZRANGE", prioritizedKey, r0 + i, r0 + i, "WITHSCORES")
    return m[1], tonumber(m[2])
  end
  local function orderAt(i)
    local id = member(i)
    return rcall("HGET", prefix .. id, orderField) or orderOf(prefix .. id, 0)
  end
  -- Binary search for the first member placed after the job (ties keep the earlier put-back
  -- first), the ends looked at first: put-backs mostly come in fetch order, or all in reverse.
  local lo, hi = 0, n
  if n > 0 then
    if orderAt(n - 1) <= order then lo = n
    elseif orderAt(0) > order then hi = 0
    else lo, hi = 1, n - 1 end
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if orderAt(mid) > order then hi = mid else lo = mid + 1 end
  end
  local below, above = base, top
  if lo > 0 then local _, s = member(lo - 1); below = s end
  if lo < n then local _, s = member(lo); above = s end
  -- At an end of the band one step (put-backs in fetch order append), else half way between the
  -- neighbours.
  local score
  if lo == n and n > 0 then score = below + STEP
  elseif lo == 0 and n > 0 then score = above - STEP
  else score = (below + above) / 2 end
  score = tonumber(fmt(score))
  if score > below and score < above then
    rcall("ZADD", prioritizedKey, fmt(score), jobId)
  else
    -- No double left there: the band is spaced out again over its middle half, leaving each end
    -- 2^14 steps, so the O(n) respacing comes once per thousands of put-backs at the ends.
    local ids = n > 0 and rcall("ZRANGE", prioritizedKey, r0, r0 + n - 1) or {}
    table.insert(ids, lo + 1, jobId)
    for i, id in ipairs(ids) do rcall("ZADD", prioritizedKey, fmt(base + 0.25 + 0.5 * i / (#ids + 1)), id) end
  end
  if not pausedOrMaxed then rcall("ZADD", markerKey, 0, "0") end
else
  -- Not prioritized (not a fleet producer's job): as BullMQ does, next in the wait list.
  rcall("RPUSH", waitKey, jobId)
  if not pausedOrMaxed then rcall("ZADD", markerKey, 0, "0") end
end
-- The stalled check told of its move already.
if not stalled then
  rcall("XADD", eventsKey, "MAXLEN", "~", meta[3] or 10000, "*", "event", "waiting", "jobId", jobId, "prev", "active")
end
return 0
`;

/** The job hash field holding a put-back job's order key (BullMQ's own fields are short names). */
export const ORDER_FIELD = 'npu-fleet-order';

let fetchCounter = 0;
const fetchSeqs = new WeakMap<Job, number>();

/**
 * The next number of this process's fetch sequence: the last tie-break of the order key, for two
 * jobs added and first fetched in the same millisecond.
 */
export function nextFetchSeq(): number {
  return ++fetchCounter;
}

/** Numbers a fetch as it reaches this process (SettlingWorker, in BullMQ's fetch order). */
export function noteFetched(job: Job): void {
  fetchSeqs.set(job, nextFetchSeq());
}

const ERRORS: Record<number, string> = {
  [-1]: 'is gone',
  [-2]: 'has no lock (it lapsed: the stalled check puts it back)',
  [-6]: 'is locked by another fetch',
};

/** The script's SHA1, loaded once (a Redis without it, restarted or another one, answers NOSCRIPT: eval loads it). */
let sha: Promise<string> | undefined;

/**
 * Moves `job`, active under `token`, back to its place in its queue (see PUT_BACK); throws a
 * FleetError when Redis refused (the job gone, its lock lapsed or taken). `seq` for a job this
 * process never received (a fetch the lost connection cut off), else the one noted at its fetch.
 */
export async function putBack(redis: Redis, prefix: string, job: Job, token: string, seq?: number): Promise<void> {
  const jobId = job.id ?? '';
  const code = await run(redis, prefix, job.queueName, jobId, token === '' ? '0' : token, seq ?? fetchSeqs.get(job) ?? nextFetchSeq(), 'active');
  if (code < 0) {
    throw new FleetError('TRANSPORT_ERROR', `putting job ${jobId} of queue ${job.queueName} back to wait failed: it ${ERRORS[code] ?? `was refused (${code})`}`, { retriable: false });
  }
}

/**
 * Why: BullMQ's stalled check (a lock that lapsed: its worker crashed or hung, Redis away longer
 * than the lock) pushes a job on the wait list, which every fetch takes before any prioritized
 * job: served next, ahead of more urgent work, and several of them last pushed first. Moved from
 * there to its place in its priority, unless a fetch took it first (this runs one round trip after
 * the check: a race BullMQ's script alone could close).
 */
export async function placeStalled(redis: Redis, prefix: string, queueName: string, jobId: string): Promise<void> {
  await run(redis, prefix, queueName, jobId, '0', nextFetchSeq(), 'stalled');
}

async function run(redis: Redis, prefix: string, queueName: string, jobId: string, token: string, seq: number, mode: 'active' | 'stalled'): Promise<number> {
  const key = (name: string): string => `${prefix}:${queueName}:${name}`;
  const keys = ['active', 'wait', 'stalled', 'meta', 'prioritized', 'marker', 'events'].map(key);
  const args = [jobId, token, key(jobId), String(seq), ORDER_FIELD, mode];
  sha ??= redis.script('LOAD', PUT_BACK).then(String, (err: unknown) => {
    sha = undefined;
    throw err;
  });
  let code: unknown;
  try {
    code = await redis.evalsha(await sha, keys.length, ...keys, ...args);
  } catch (err) {
    if (!String((err as Error)?.message).includes('NOSCRIPT')) throw err;
    code = await redis.eval(PUT_BACK, keys.length, ...keys, ...args);
  }
  return Number(code);
}
