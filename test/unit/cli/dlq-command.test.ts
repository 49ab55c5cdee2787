import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DLQ_EXIT, dlqCommand, parseReasons, parseRefreshDeadline, parseSince, replayExitCode } from '../../../src/cli/dlq-command.ts';
import { FleetError } from '../../../src/errors/fleet-error.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

describe('npu-fleet dlq arguments', () => {
  const now = Date.UTC(2026, 10, 30, 12, 0, 0);

  it.each([
    ['90s', now - 90_000],
    ['30m', now - 1_800_000],
    ['2h', now - 7_200_000],
    ['7d', now - 7 * 86_400_000],
    ['2026-11-30T08:00:00Z', Date.UTC(2026, 10, 30, 8)],
  ])('--since %s', (value, expected) => {
    expect(parseSince(value, now)).toBe(expected);
  });

  it.each([
    ['2026-11-30T08:00:00+02:00', Date.UTC(2026, 10, 30, 6)],
    ['2026-11-30T08:00-0130', Date.UTC(2026, 10, 30, 9, 30)],
    ['2026-11-30T08:00Z', Date.UTC(2026, 10, 30, 8)],
    ['2026-11-30T08:00:00.250z', Date.UTC(2026, 10, 30, 8, 0, 0, 250)],
  ])('--since %s (an offset or Z, any case)', (value, expected) => {
    expect(parseSince(value, now)).toBe(expected);
  });

  // Without a zone Date.parse read the time in the local zone of whichever host ran the command:
  // one --since named different instants for operators (and cron hosts) in different zones.
  it.each([
    ['2026-11-30T08:00', '2026-11-30T08:00Z'],
    ['2026-11-30T08:00:00', '2026-11-30T08:00:00Z'],
    ['2026-11-30 08:00:00.5', '2026-11-30 08:00:00.5Z'],
    ['2026-11-30', '2026-11-30T00:00:00Z'],
  ])('--since %s without a time zone is refused, naming the field and the fix', (value, fixed) => {
    let thrown: unknown;
    try {
      parseSince(value, now);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(FleetError);
    const err = thrown as FleetError;
    expect(err.code).toBe('INVALID_ARGUMENT');
    expect(err.details).toMatchObject({ field: 'since' });
    expect(err.message).toContain(`--since ${value} has no time zone`);
    expect(err.message).toContain(`add Z or an offset, e.g. ${fixed}`);
    // The fix it names is accepted.
    expect(Number.isFinite(parseSince(fixed, now))).toBe(true);
  });

  it.each(['yesterday', '2h ago', '-5m', '12', ''])('--since %j is refused, naming the flag and the forms it takes', (value) => {
    expect(() => parseSince(value, now)).toThrow(/--since must be a duration back from now \(30m, 2h, 7d\) or an ISO time/);
  });

  it('--reason takes a comma list of codes and refuses anything else', () => {
    expect(parseReasons('DEVICE_HANG, UNKNOWN_MODEL')).toEqual(['DEVICE_HANG', 'UNKNOWN_MODEL']);
    for (const bad of ['device_hang', ',', 'DEVICE-HANG']) expect(() => parseReasons(bad)).toThrow(/--reason takes reason codes/);
  });

  // A misspelt code matched nothing, and `dlq replay --reason DEVICE_HNAG` exited 0 ("re-sent 0 of
  // 0"), which a scheduled replay reads as success while the hung requests stay in the DLQ.
  it('--reason refuses a code no dead letter can have, naming it and the codes there are', () => {
    expect(() => parseReasons('DEVICE_HANG,DEVICE_HNAG')).toThrow(/^--reason DEVICE_HNAG is not a reason code; the codes are .*\bDEVICE_HANG\b/);
    try {
      parseReasons('DEVICE_HNAG');
    } catch (err) {
      expect(err).toBeInstanceOf(FleetError);
      expect((err as FleetError).code).toBe('INVALID_ARGUMENT');
      expect((err as FleetError).details).toMatchObject({ field: 'reason' });
    }
  });

  it('--refresh-deadline takes a duration ahead (no ISO time, nothing <= 0)', () => {
    expect(parseRefreshDeadline('30s')).toBe(30_000);
    expect(parseRefreshDeadline('5m')).toBe(300_000);
    expect(parseRefreshDeadline('2h')).toBe(7_200_000);
    for (const bad of ['0s', '-5m', '30', '2026-11-30T08:00:00Z', 'soon']) expect(() => parseRefreshDeadline(bad)).toThrow(/--refresh-deadline must be a duration ahead of the re-send/);
  });

  it('replay exit codes: 0 nothing left, 3 only expired records skipped, 1 any other skip', () => {
    expect(replayExitCode([])).toBe(DLQ_EXIT.done);
    expect(replayExitCode([{ expired: true }, { expired: true }])).toBe(3);
    expect(replayExitCode([{ expired: true }, {}])).toBe(1);
    expect(replayExitCode([{}])).toBe(1);
  });

  it('refuses a missing subcommand or model, list-only misuse and the memory transport before connecting', async () => {
    const config = join(tempDir('npu-fleet-dlq-'), 'fleet.yaml');
    writeFileSync(config, 'transport: { kind: memory }\n');
    await expect(dlqCommand(['--model', 'm'])).rejects.toThrow(/usage: npu-fleet dlq list\|replay\|purge/);
    await expect(dlqCommand(['drop', '--model', 'm'])).rejects.toThrow(/usage: npu-fleet dlq list\|replay\|purge/);
    await expect(dlqCommand(['purge', '--model', 'm'])).rejects.toThrow(/give --expired/);
    await expect(dlqCommand(['purge', '--model', 'm', '--expired', '--refresh-deadline', '30s'])).rejects.toThrow(/belong to `dlq replay`/);
    await expect(dlqCommand(['list', '--model', 'm', '--expired'])).rejects.toThrow(/--expired belongs to `dlq purge`/);
    await expect(dlqCommand(['list'])).rejects.toThrow(/--model NAME is required/);
    await expect(dlqCommand(['list', '--model', 'm', '--dry-run'])).rejects.toThrow(/belong to `dlq replay`/);
    await expect(dlqCommand(['list', '--model', 'm', '--refresh-deadline', '30s'])).rejects.toThrow(/belong to `dlq replay`/);
    await expect(dlqCommand(['replay', '--model', 'm', '--refresh-deadline', '30'])).rejects.toThrow(/--refresh-deadline must be a duration/);
    await expect(dlqCommand(['replay', '--model', 'm', '--limit', '0'])).rejects.toThrow(/--limit must be an integer >= 1/);
    await expect(dlqCommand(['replay', '--model', 'm', '--priority', '16'])).rejects.toThrow(/--priority must be an integer from 0 to 15/);
    await expect(dlqCommand(['list', '--model', 'm', '--config', config])).rejects.toThrow(/dlq needs a Kafka or BullMQ transport/);
  });

  it.each(['kafka', 'bullmq'] as const)('a --model no model can have is refused naming the option, before connecting (%s)', async (kind) => {
    const config = join(tempDir('npu-fleet-dlq-'), 'fleet.yaml');
    // Nothing listens there: the check must come first.
    writeFileSync(config, kind === 'kafka' ? 'transport: { kind: kafka, kafka: { brokers: ["127.0.0.1:1"] } }\n' : 'transport: { kind: bullmq, bullmq: { redisUrl: "redis://127.0.0.1:1" } }\n');
    for (const model of ['foo:bar', 'a b', '-x']) {
      const err: unknown = await dlqCommand(['list', '--model', model, '--config', config], () => undefined).catch((e: unknown) => e);
      expect(FleetError.is(err, 'INVALID_ARGUMENT'), String(err)).toBe(true);
      expect((err as Error).message).toMatch(/--model/);
    }
  });

  it('--priority on Kafka (where a record\'s topic is its priority) is refused naming the flag, before connecting', async () => {
    const config = join(tempDir('npu-fleet-dlq-'), 'fleet.yaml');
    writeFileSync(config, 'transport: { kind: kafka, kafka: { brokers: ["127.0.0.1:1"] } }\n');
    const err: unknown = await dlqCommand(['replay', '--model', 'm', '--priority', '0', '--config', config], () => undefined).catch((e: unknown) => e);
    expect(FleetError.is(err, 'INVALID_ARGUMENT'), String(err)).toBe(true);
    expect((err as Error).message).toMatch(/--priority is for BullMQ records .*drop --priority/);
  });

  it('--help prints the usage', async () => {
    const lines: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string) => (lines.push(chunk), true)) as typeof process.stdout.write;
    try {
      expect(await dlqCommand(['--help'])).toBe(0);
    } finally {
      process.stdout.write = write;
    }
    expect(lines.join('')).toMatch(/npu-fleet dlq list\|replay\|purge --model NAME/);
    expect(lines.join('')).toMatch(/Exit codes of replay and purge: 0 .* 3 only records whose deadline had passed .* 1 records were\s+skipped/s);
  });
});
