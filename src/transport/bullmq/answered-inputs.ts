import type { Redis } from 'ioredis';

/** Inputs up to this size stay on an answered request job (for inspection); larger ones go. */
export const KEEP_ANSWERED_INPUT_BYTES = 4_096;

/**
 * For each job id in ARGV[2..] still in the completed set KEYS[1] (retention may have removed it
 * meanwhile, and writing then would leave a stray hash), replaces a data field longer than ARGV[1]
 * bytes by a note of its size. KEYS[2..]: the job hashes, in the order of the ids.
 */
const DROP_LARGE_INPUTS = `
local kept = tonumber(ARGV[1])
for i = 2, #ARGV do
  local key = KEYS[i]
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    local bytes = redis.call('HSTRLEN', key, 'data')
    if bytes > kept then
      redis.call('HSET', key, 'data', '{"inputRemoved":"answered; its input (' .. bytes .. ' bytes as JSON) is not kept","bytes":' .. bytes .. '}')
    end
  end
end
return 0
`;

/**
 * Why: an answered request job is kept (the producer's removeOnComplete: an hour, up to 10,000 per
 * queue) so that a second publish of its id is dropped and a repeated request() gets its return
 * value. It kept its input too: with images (a 3x224x224 float32 one is about 800 KB as JSON)
 * that is about 0.9 MB of Redis per job, up to ~9 GB per model queue, enough to put Redis out of
 * memory. Nothing reads an answered job's input (a DLQ record carries its own copy), so once the
 * job is completed an input over KEEP_ANSWERED_INPUT_BYTES is replaced by a note of its size; the
 * job, its id and its return value stay. One script call per request queue.
 */
export async function dropAnsweredInputs(redis: Redis, prefix: string, byQueue: ReadonlyMap<string, readonly string[]>): Promise<void> {
  await Promise.all(
    [...byQueue].map(([queue, ids]) => {
      const keys = [`${prefix}:${queue}:completed`, ...ids.map((id) => `${prefix}:${queue}:${id}`)];
      return redis.eval(DROP_LARGE_INPUTS, keys.length, ...keys, KEEP_ANSWERED_INPUT_BYTES.toString(), ...ids);
    }),
  );
}

/**
 * Whether a job's data may be over KEEP_ANSWERED_INPUT_BYTES, judged without serialising it: a
 * request's base64 tensor data make up nearly all of its JSON, so their lengths decide; a string
 * (a body that was not JSON) by its length; any other shape is passed to the script to measure.
 */
export function mayHoldLargeInput(data: unknown): boolean {
  if (typeof data === 'string') return data.length > KEEP_ANSWERED_INPUT_BYTES;
  const inputs = typeof data === 'object' && data !== null ? (data as { inputs?: unknown }).inputs : undefined;
  if (!Array.isArray(inputs)) return true;
  let chars = 0;
  for (const t of inputs) {
    const d = typeof t === 'object' && t !== null ? (t as { data?: unknown }).data : undefined;
    if (typeof d !== 'string') return true;
    chars += d.length;
    if (chars > KEEP_ANSWERED_INPUT_BYTES / 2) return true;
  }
  return false;
}
