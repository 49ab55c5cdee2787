/**
 * CPU spent per message over a bench's timed window, split by where it ran: this process's main
 * JavaScript thread, its other threads (V8 GC helpers, libuv pool, the device's native threads),
 * and Redis (its own INFO counters). On a 2-core machine shared with the broker, throughput
 * ratios move with the neighbours; CPU per message says which side pays what.
 * Linux only (/proc/self/task); elsewhere the thread split reads as zero.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { Redis } from 'ioredis';

interface Mark {
  readonly mainUs: number;
  readonly otherUs: number;
  readonly byName: ReadonlyMap<string, number>;
  readonly redisUs: number | undefined;
  readonly kafkaUs: number | undefined;
  readonly commands: Map<string, { calls: number; usec: number }> | undefined;
}

export interface CpuUse {
  /** µs of CPU per message. */
  readonly mainUs: number;
  readonly otherUs: number;
  /** The other threads by name (V8 GC helpers, libuv pool, native threads). */
  readonly otherByName: ReadonlyMap<string, number>;
  readonly redisUs: number | undefined;
  /** The bench's local Kafka broker (a JVM on this machine), all its threads; undefined for KAFKA_BROKERS. */
  readonly kafkaUs: number | undefined;
}

const TICK_US = 1e6 / 100; // USER_HZ is 100 on Linux.

function threadTimesUs(): { mainUs: number; otherUs: number; byName: Map<string, number> } {
  let mainUs = 0;
  let otherUs = 0;
  const byName = new Map<string, number>();
  try {
    for (const tid of readdirSync('/proc/self/task')) {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      // Fields after the parenthesised name: utime and stime are fields 14 and 15 of the line.
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const us = (Number(rest[11]) + Number(rest[12])) * TICK_US;
      if (Number(tid) === process.pid) mainUs += us;
      else {
        otherUs += us;
        const name = `${stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"))}/${tid}`;
        byName.set(name, (byName.get(name) ?? 0) + us);
      }
    }
  } catch {
    // Not Linux: no split.
  }
  return { mainUs, otherUs, byName };
}

async function redisCpuUs(redis: Redis | undefined): Promise<number | undefined> {
  if (redis === undefined) return undefined;
  const info = await redis.info('cpu');
  const field = (name: string): number => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? NaN);
  return (field('used_cpu_sys') + field('used_cpu_user')) * 1e6;
}

function processCpuUs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) * TICK_US;
  } catch {
    return undefined;
  }
}

/** Marks the start of a timed window; `since` turns the window into CPU per message. */
export class CpuMeter {
  private readonly redis: Redis | undefined;
  /** @param kafkaPid a broker process on this machine (the bench's local one), whose CPU is counted too. */
  constructor(
    redisUrl?: string,
    private readonly kafkaPid?: number,
  ) {
    this.redis = redisUrl === undefined ? undefined : new Redis(redisUrl, { lazyConnect: false, maxRetriesPerRequest: 1 });
  }

  async mark(): Promise<Mark> {
    return { ...threadTimesUs(), redisUs: await redisCpuUs(this.redis), kafkaUs: processCpuUs(this.kafkaPid), commands: await this.commandStats() };
  }

  /** BENCH_REDIS_COMMANDS=1: Redis's own per-command counters (calls, µs), for the per-message split. */
  private async commandStats(): Promise<Map<string, { calls: number; usec: number }> | undefined> {
    if (this.redis === undefined || !process.env['BENCH_REDIS_COMMANDS']) return undefined;
    const out = new Map<string, { calls: number; usec: number }>();
    for (const m of (await this.redis.info('commandstats')).matchAll(/^cmdstat_([\w|]+):calls=(\d+),usec=(\d+)/gm)) {
      out.set(m[1] ?? '', { calls: Number(m[2]), usec: Number(m[3]) });
    }
    return out;
  }

  async since(start: Mark, messages: number): Promise<CpuUse> {
    const end = await this.mark();
    const per = (a: number, b: number): number => (b - a) / messages;
    if (start.commands !== undefined && end.commands !== undefined) {
      const rows = [...end.commands]
        .map(([name, e]) => ({ name, calls: (e.calls - (start.commands?.get(name)?.calls ?? 0)) / messages, usec: (e.usec - (start.commands?.get(name)?.usec ?? 0)) / messages }))
        .filter((r) => r.calls >= 0.01)
        .sort((a, b) => b.usec - a.usec);
      process.stderr.write(`    redis per message: ${rows.map((r) => `${r.name} ${r.calls.toFixed(2)}x ${r.usec.toFixed(1)}µs`).join(', ')}\n`);
    }
    const otherByName = new Map<string, number>();
    for (const [name, us] of end.byName) otherByName.set(name, per(start.byName.get(name) ?? 0, us));
    return {
      mainUs: per(start.mainUs, end.mainUs),
      otherByName,
      otherUs: per(start.otherUs, end.otherUs),
      redisUs: start.redisUs === undefined || end.redisUs === undefined ? undefined : per(start.redisUs, end.redisUs),
      kafkaUs: start.kafkaUs === undefined || end.kafkaUs === undefined ? undefined : per(start.kafkaUs, end.kafkaUs),
    };
  }

  close(): void {
    this.redis?.disconnect();
  }
}

export function formatCpu(c: CpuUse | undefined): string {
  if (c === undefined) return '';
  const redis = c.redisUs === undefined ? '' : `, redis ${c.redisUs.toFixed(0)}`;
  const named = [...c.otherByName].filter(([, us]) => us >= 0.5).map(([name, us]) => `${name} ${us.toFixed(0)}`).join(', ');
  const kafka = c.kafkaUs === undefined ? '' : `, kafka broker ${c.kafkaUs.toFixed(0)}`;
  return `cpu µs/msg: main ${c.mainUs.toFixed(0)}, other threads ${c.otherUs.toFixed(0)}${named === '' ? '' : ` (${named})`}${redis}${kafka}`;
}
