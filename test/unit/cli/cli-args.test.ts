import { describe, expect, it } from 'vitest';
import { intOption, msOption, noPositionals, parseCommandArgs } from '../../../src/cli/cli-args.ts';
import { fleetErrorOf as problem } from '../../helpers/fleet-error-of.ts';

const options = { device: { type: 'string' }, demo: { type: 'boolean' } } as const;

describe('parseCommandArgs', () => {
  it('parses options and positionals', () => {
    const parsed = parseCommandArgs('worker', ['--device', '3', 'stray'], options);
    expect(parsed?.values.device).toBe('3');
    expect(parsed?.positionals).toEqual(['stray']);
  });

  it.each([['--help'], ['-h']])('%s prints the command usage and returns undefined', (flag) => {
    const printed: string[] = [];
    expect(parseCommandArgs('worker', ['--device', '1', flag], options, (t) => printed.push(t))).toBeUndefined();
    expect(printed.join('\n')).toMatch(/npu-fleet worker --device N/);
  });

  it.each([
    [['--bogus'], /^unknown option --bogus \(run npu-fleet worker --help\)$/],
    [['--device', '-1'], /^--device needs a value \(a value starting with '-' is written --device=VALUE\)/],
    [['--demo=yes'], /^--demo takes no value/],
    [['--device'], /^--device needs a value/],
  ])('%j becomes INVALID_ARGUMENT naming the option', (args, message) => {
    const err = problem(() => parseCommandArgs('worker', args, options));
    expect(err.code).toBe('INVALID_ARGUMENT');
    expect(err.message).toMatch(message);
  });

  it('noPositionals names the stray word', () => {
    expect(() => noPositionals('start', [])).not.toThrow();
    expect(problem(() => noPositionals('start', ['extra'])).message).toBe('unexpected argument "extra" (run npu-fleet start --help)');
  });
});

describe('numeric options', () => {
  it.each([
    ['1', 1, 1],
    ['0', 0, 0],
    ['1000000', 1, 1_000_000],
  ])('intOption accepts %s', (value, min, expected) => {
    expect(intOption('count', value, min, 1_000_000)).toBe(expected);
  });

  it.each([['abc'], [''], ['1.5'], ['0'], ['-3'], ['1000001'], ['1e9']])('intOption refuses %j with the flag and range', (value) => {
    const err = problem(() => intOption('count', value, 1, 1_000_000));
    expect(err.code).toBe('INVALID_ARGUMENT');
    expect(err.message).toBe(`--count must be an integer from 1 to 1000000, got "${value}"`);
  });

  it('intOption without a maximum says so', () => {
    expect(problem(() => intOption('device', '-1', 0)).message).toBe('--device must be an integer >= 0, got "-1"');
  });

  it.each([['0'], ['-5'], ['soon'], ['Infinity']])('msOption refuses %j', (value) => {
    expect(problem(() => msOption('timeout-ms', value)).message).toBe(`--timeout-ms must be a positive number of milliseconds, got "${value}"`);
  });

  it('msOption accepts fractions', () => {
    expect(msOption('deadline-ms', '2.5')).toBe(2.5);
  });
});
