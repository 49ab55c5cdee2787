import { describe, expect, it } from 'vitest';
import { ZERO_TIMINGS, type ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { FrameOrderedSettle } from '../../../src/runtime/frame-ordered-settle.ts';
import type { AnsweredFrame, Delivery, FrameClaim, NewerFrame, Outcome, Transport } from '../../../src/transport/transport.ts';

const delivery = (id: string): Delivery => ({ deliveryId: id, model: 'm', priority: 0, body: {}, receivedAt: 0, redelivered: false });
const result = (id: string, status: ResultEnvelope['status'] = 'ok'): ResultEnvelope => ({
  id,
  model: 'm',
  version: '1',
  status,
  ...(status === 'ok' ? { outputs: [], late: true } : { error: { code: 'DEADLINE_EXCEEDED', message: 'x' } }),
  timings: ZERO_TIMINGS,
  batchSize: 2,
  gear: 2,
  device: 0,
  worker: 'w',
});
const frame = (id: string, frameAt: number): AnsweredFrame => ({ model: 'm', requestId: id, streamKey: 'cam', frameAt });

/** A transport whose claims answer `newer` (by request id) and that records what it settles. */
function transport(newer: Record<string, NewerFrame>, settleFails = false) {
  const claimed: AnsweredFrame[][] = [];
  const settled: Outcome[][] = [];
  const events: string[] = [];
  const t: Pick<Transport, 'settle' | 'claimNewestFrames'> = {
    settle: async (outcomes) => {
      settled.push([...outcomes]);
      events.push('settle');
      if (settleFails) throw new Error('broker away');
    },
    claimNewestFrames: async (frames): Promise<FrameClaim> => {
      claimed.push([...frames]);
      events.push('claim');
      return { newer: frames.map((f) => newer[f.requestId]), release: () => void events.push('release') };
    },
  };
  return { t, claimed, settled, events };
}

describe('FrameOrderedSettle: ok results of stream frames claimed before they are published', () => {
  it('only the refused frame becomes rejected / SUPERSEDED; other results and frames go out as they were', async () => {
    const { t, claimed, settled, events } = transport({ old: { requestId: 'new', frameAt: 20 } });
    const s = new FrameOrderedSettle(t);
    const outcomes: Outcome[] = [
      { delivery: delivery('d-old'), result: result('old') },
      { delivery: delivery('d-plain'), result: result('plain') },
      { delivery: delivery('d-fresh'), result: result('fresh') },
      { delivery: delivery('d-expired'), result: result('expired', 'expired') },
    ];
    s.note(outcomes[0]!.delivery, frame('old', 10));
    s.note(outcomes[2]!.delivery, frame('fresh', 30));
    s.note(outcomes[3]!.delivery, frame('expired', 5));
    await s.settle(outcomes);
    // One claim for the settle's ok frames, in order; the non-stream and non-ok results are not claimed.
    expect(claimed).toEqual([[frame('old', 10), frame('fresh', 30)]]);
    expect(events).toEqual(['claim', 'settle', 'release']);
    const out = settled[0]!;
    expect(out.slice(1)).toEqual(outcomes.slice(1));
    const refused = out[0]!.result;
    expect(refused.status).toBe('rejected');
    expect(refused.error?.code).toBe('SUPERSEDED');
    expect(refused.error?.message).toMatch(/^superseded by request new of stream "cam" \(createdAt 20 > 10\)/);
    expect(refused).not.toHaveProperty('outputs');
    expect(refused).not.toHaveProperty('late');
    expect(refused.device).toBe(0);
    // The caller's metrics see what went out.
    expect(s.answeredAs(outcomes[0]!.result)).toBe(refused);
    expect(s.answeredAs(outcomes[2]!.result)).toBe(outcomes[2]!.result);
  });

  it('no stream frame in the settle: no claim at all', async () => {
    const { t, claimed, settled } = transport({});
    const outcomes: Outcome[] = [{ delivery: delivery('d'), result: result('a') }];
    await new FrameOrderedSettle(t).settle(outcomes);
    expect(claimed).toEqual([]);
    expect(settled).toEqual([outcomes]);
  });

  it('a settle that fails still releases its streams, and the failure reaches the caller (who retries)', async () => {
    const { t, events } = transport({}, true);
    const s = new FrameOrderedSettle(t);
    const o: Outcome = { delivery: delivery('d'), result: result('a') };
    s.note(o.delivery, frame('a', 1));
    await expect(s.settle([o])).rejects.toThrow('broker away');
    expect(events).toEqual(['claim', 'settle', 'release']);
  });

  it('says which worker answered the newer frame: this one when its own later settle went first (a publish retried), else another', async () => {
    // Claims against one mark per stream, as the Redis script keeps them.
    const marks = new Map<string, NewerFrame>();
    const claim = (frames: readonly AnsweredFrame[]): NewerFrame[] =>
      frames.map((f) => {
        const mark = marks.get(f.streamKey);
        if (mark !== undefined && mark.frameAt > f.frameAt) return mark;
        marks.set(f.streamKey, { requestId: f.requestId, frameAt: f.frameAt });
        return undefined as unknown as NewerFrame;
      });
    let failNext = true;
    const settled: Outcome[] = [];
    const t: Pick<Transport, 'settle' | 'claimNewestFrames'> = {
      settle: async (outcomes) => {
        if (failNext) {
          failNext = false;
          throw new Error('redis away');
        }
        settled.push(...outcomes);
      },
      claimNewestFrames: async (frames): Promise<FrameClaim> => ({ newer: claim(frames), release: () => {} }),
    };
    const s = new FrameOrderedSettle(t);
    const older: Outcome = { delivery: delivery('d1'), result: result('f1') };
    const newer: Outcome = { delivery: delivery('d2'), result: result('f2') };
    s.note(older.delivery, frame('f1', 10));
    s.note(newer.delivery, frame('f2', 20));
    await expect(s.settle([older])).rejects.toThrow('redis away');
    await s.settle([newer]);
    await s.settle([older]); // the retry, after this worker's newer frame went out
    expect(settled.map((o) => o.result.status)).toEqual(['ok', 'rejected']);
    expect(settled[1]?.result.error?.message).toMatch(/^superseded by request f2 of stream "cam" \(createdAt 20 > 10\), which was answered first \(on this worker\)/);
    // Another worker's claim moves the mark on: a frame of this worker older than it is refused for it.
    marks.set('cam', { requestId: 'elsewhere', frameAt: 40 });
    const third: Outcome = { delivery: delivery('d3'), result: result('f3') };
    s.note(third.delivery, frame('f3', 30));
    await s.settle([third]);
    expect(settled[2]?.result.error?.message).toMatch(/by request elsewhere .*answered first \(on another worker\)/);
  });

  it('a claim sharing a stream with an earlier settle\'s claim still out is made once that one returned; others at once', async () => {
    const issued: string[] = [];
    const answers = new Map<string, () => void>();
    const t: Pick<Transport, 'settle' | 'claimNewestFrames'> = {
      settle: async () => {},
      claimNewestFrames: (frames) => {
        const ids = frames.map((f) => f.requestId).join('+');
        issued.push(ids);
        return new Promise<FrameClaim>((r) => answers.set(ids, () => r({ newer: frames.map(() => undefined), release: () => {} })));
      },
    };
    const s = new FrameOrderedSettle(t);
    const settle = (...frames: AnsweredFrame[]): Promise<void> => {
      const outcomes = frames.map((f) => ({ delivery: delivery(`d-${f.requestId}`), result: result(f.requestId) }));
      outcomes.forEach((o, i) => s.note(o.delivery, frames[i]!));
      return s.settle(outcomes);
    };
    const other = (id: string, frameAt: number): AnsweredFrame => ({ ...frame(id, frameAt), streamKey: 'other' });
    const first = settle(other('x1', 1), frame('c1', 1));
    const second = settle(frame('c2', 2));
    const third = settle({ ...frame('y1', 1), streamKey: 'y' });
    const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
    await tick();
    expect(issued).toEqual(['x1+c1', 'y1']);
    answers.get('x1+c1')!();
    await tick();
    expect(issued).toEqual(['x1+c1', 'y1', 'c2']);
    answers.get('c2')!();
    answers.get('y1')!();
    await Promise.all([first, second, third]);
  });

  it('a transport without claims (Kafka, memory) is not wrapped', () => {
    expect(new FrameOrderedSettle({ settle: async () => {} }).checks).toBe(false);
    expect(new FrameOrderedSettle(transport({}).t).checks).toBe(true);
  });
});
