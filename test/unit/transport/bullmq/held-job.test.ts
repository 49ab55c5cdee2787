import { WaitingError, type Job } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { HeldJob, type JobFetch, type MoveBack } from '../../../../src/transport/bullmq/held-job.ts';

type Completions = Map<string, (error: Error | undefined) => void>;

/** The put-back the transport gives a HeldJob, here the fake job's own (records the token). */
const moveBack: MoveBack = async (job, token) => void (await job.moveToWait(token));

/** One fetch of job 'j': records how its processor ended and its moves back to wait. */
function fetchOf(token: string, moves: string[], moveFails = false): JobFetch & { ended: Promise<{ value?: unknown; error?: Error }> } {
  let resolve!: (v: unknown) => void;
  let reject!: (e: Error) => void;
  const processor = new Promise<unknown>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  const job = {
    id: 'j',
    moveToWait: async (t: string) => {
      moves.push(t);
      if (moveFails) throw new Error(`Missing lock for job j (${t})`);
    },
  } as unknown as Job;
  return {
    job,
    token,
    resolve,
    reject,
    ended: processor.then(
      (value) => ({ value }),
      (error: Error) => ({ error }),
    ),
  };
}

describe('HeldJob', () => {
  it('a fetch adopted before completion: the earlier processor ends with WaitingError, completion goes to the new fetch', async () => {
    const completions: Completions = new Map();
    const first = fetchOf('w:1', []);
    const held = new HeldJob('m', first, completions, moveBack);
    const second = fetchOf('w:2', []);
    held.adopt(second);
    expect((await first.ended).error).toBeInstanceOf(WaitingError);
    expect(held.token).toBe('w:2');
    const done = held.complete({ ok: 1 });
    expect(await second.ended).toEqual({ value: { ok: 1 } });
    completions.get('w:2')?.(undefined);
    await done;
    expect(completions.has('w:1')).toBe(false);
  });

  it('a fetch adopted while the earlier one is being completed: its lock failure completes the new fetch instead', async () => {
    const completions: Completions = new Map();
    const first = fetchOf('w:1', []);
    const held = new HeldJob('m', first, completions, moveBack);
    const done = held.complete('result');
    expect(await first.ended).toEqual({ value: 'result' });
    const second = fetchOf('w:2', []);
    held.adopt(second);
    completions.get('w:1')?.(new Error('Missing lock for job j. moveToFinished'));
    expect(await second.ended).toEqual({ value: 'result' });
    completions.get('w:2')?.(undefined);
    await expect(done).resolves.toBeUndefined();
  });

  it('a completion that fails with no newer fetch fails', async () => {
    const completions: Completions = new Map();
    const held = new HeldJob('m', fetchOf('w:1', []), completions, moveBack);
    const done = held.complete('result');
    await Promise.resolve();
    completions.get('w:1')?.(new Error('Missing lock'));
    await expect(done).rejects.toThrow('Missing lock');
  });

  it('moveBack moves back and ends the fetch adopted meanwhile too, and reports a refused move of the last one', async () => {
    const moves: string[] = [];
    const first = fetchOf('w:1', moves, true);
    const held = new HeldJob('m', first, new Map(), moveBack);
    const second = fetchOf('w:2', moves);
    const back = held.moveBack();
    held.adopt(second);
    await back;
    expect(moves).toEqual(['w:1', 'w:2']);
    expect((await first.ended).error).toBeInstanceOf(WaitingError);
    expect((await second.ended).error).toBeInstanceOf(WaitingError);

    const lone = new HeldJob('m', fetchOf('w:3', moves, true), new Map(), moveBack);
    await expect(lone.moveBack()).rejects.toThrow('Missing lock for job j (w:3)');
  });
});
