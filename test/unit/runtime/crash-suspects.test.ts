import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { CrashSuspects } from '../../../src/runtime/crash-suspects.ts';
import { InflightJournal, readInflightJournal, type CrashHint } from '../../../src/runtime/inflight-journal.ts';
import type { Delivery } from '../../../src/transport/transport.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

/** A crash hint of a batch that did not hang. */
const h = (suspectCount: number): CrashHint => ({ suspectCount, hung: false });

const log = createLogger({ level: 'silent' });
const delivery = (id: string, suspectCount = 0): Delivery => ({ deliveryId: id, model: 'm', priority: 1, body: new Uint8Array(1), receivedAt: 0, redelivered: false, suspectCount });

describe('CrashSuspects', () => {
  it('journals the batches in flight as they start and finish; a batch with a suspect has the device to itself', () => {
    const journal = new InflightJournal(join(tempDir('npu-fleet-crash-'), 'j.json'));
    const c = new CrashSuspects({ journal, transport: { markSuspect: () => Promise.resolve(true) }, log });
    const a = c.started([delivery('t/0/1'), delivery('t/0/2')]);
    expect(c.suspectOnDevice).toBe(false);
    const b = c.started([delivery('t/0/3', 1)]);
    expect(c.suspectOnDevice).toBe(true);
    // The suspect waits for the batch ahead to leave the device (BatchRunner): a crash till then is not its.
    expect(readInflightJournal(journal.path)).toEqual({ batches: [[['t/0/1', 0], ['t/0/2', 0]]] });
    c.finished(a, true);
    expect(readInflightJournal(journal.path)).toEqual({ batches: [[['t/0/3', 1]]] });
    c.finished(b, true);
    expect(c.suspectOnDevice).toBe(false);
    expect(readInflightJournal(journal.path)).toEqual({ batches: [] });
    journal.close();
  });

  it('a hinted delivery comes back a suspect, one above the broker or the journal, once the broker recorded it', async () => {
    const marked: string[] = [];
    let release: () => void = () => undefined;
    const c = new CrashSuspects({
      hints: new Map([['t/0/5', h(0)], ['t/0/6', h(3)]]),
      transport: { markSuspect: (ds) => new Promise<boolean>((r) => ((release = () => r(true)), marked.push(...ds.map((d) => d.deliveryId)))) },
      log,
    });
    expect(c.take(delivery('t/0/4'))).toBeUndefined();
    const five = c.take(delivery('t/0/5', 1));
    expect(marked).toEqual(['t/0/5']);
    expect(c.pending).toBe(1); // not admitted before the broker has it
    release();
    expect((await five)?.suspectCount).toBe(2);
    expect(c.pending).toBe(0);
    const six = c.take(delivery('t/0/6', 1));
    release();
    expect((await six)?.suspectCount).toBe(4); // the journal's count when the broker lost its own
    expect(c.take(delivery('t/0/5', 2))).toBeUndefined(); // a hint counts once
  });

  it('a broker that cannot record it does not hold the delivery back', async () => {
    const c = new CrashSuspects({ hints: new Map([['q/j1', h(0)]]), transport: { markSuspect: () => Promise.reject(new Error('redis down')) }, log });
    expect((await c.take(delivery('q/j1')))?.suspectCount).toBe(1);
    expect(c.pending).toBe(0);
  });
});

describe('CrashSuspects after a hang', () => {
  it('journals the hung batch alone, marked hung; a request the broker holds that hang for keeps its count', async () => {
    const journal = new InflightJournal(join(tempDir('npu-fleet-crash-'), 'j.json'));
    const c = new CrashSuspects({ journal, transport: { markSuspect: () => Promise.resolve(false) }, log });
    c.started([delivery('t/0/1'), delivery('t/0/2', 1)]);
    c.started([delivery('t/0/3')]); // waiting behind the hung batch: not blamed
    await c.hung([delivery('t/0/1'), delivery('t/0/2', 1)], 'm');
    journal.close();
    const hints = new InflightJournal(journal.path).takeCrashHints();
    expect(hints).toEqual(new Map([['t/0/1', { suspectCount: 0, hung: true }], ['t/0/2', { suspectCount: 1, hung: true }]]));
    const marked: string[] = [];
    const next = new CrashSuspects({ hints, transport: { markSuspect: (ds) => (marked.push(...ds.map((d) => d.deliveryId)), Promise.resolve(true)) }, log });
    expect((await next.take(delivery('t/0/1', 1)))?.suspectCount).toBe(1); // the broker holds it
    expect((await next.take(delivery('t/0/2', 1)))?.suspectCount).toBe(2); // the broker lost it: counted here
    expect(marked).toEqual(['t/0/2']);
  });
});

describe('CrashSuspects carrying what a dead predecessor left', () => {
  it('a worker killed before the requests of its predecessor crash came back leaves them to the next worker, each counted once', async () => {
    const path = join(tempDir('npu-fleet-crash-'), 'j.json');
    const first = new InflightJournal(path);
    first.record(['[["t/0/1",0],["t/0/2",1,1]]']); // the first worker dies with this batch on the device
    first.close();

    // The second takes the hints, and is SIGKILLed before either request came back to it.
    const second = new InflightJournal(path);
    const hints2 = second.takeCrashHints();
    new CrashSuspects({ journal: second, hints: hints2, transport: { markSuspect: () => Promise.resolve(true) }, log });
    second.close();

    // The third still knows both, as the second found them: their crash is not counted yet.
    const third = new InflightJournal(path);
    const hints3 = third.takeCrashHints();
    const foundAt = expect.any(Number) as number;
    expect(hints3).toEqual(new Map([['t/0/1', { ...h(0), foundAt }], ['t/0/2', { suspectCount: 1, hung: true, foundAt }]]));
    const c = new CrashSuspects({ journal: third, hints: hints3, transport: { markSuspect: () => Promise.resolve(true) }, log });
    // One came back and was recorded with the broker: the journal no longer carries it.
    expect((await c.take(delivery('t/0/1')))?.suspectCount).toBe(1);
    expect(readInflightJournal(path)).toEqual({ batches: [[['t/0/2', 1, 1, foundAt]]] });
    // Batches run, a hang is recorded, the worker stops cleanly: the other is still carried.
    const b = c.started([delivery('t/0/7')]);
    expect(readInflightJournal(path)).toEqual({ batches: [[['t/0/7', 0]], [['t/0/2', 1, 1, foundAt]]] });
    c.finished(b, true);
    c.clear();
    c.record();
    expect(readInflightJournal(path)).toEqual({ batches: [[['t/0/2', 1, 1, foundAt]]] });
    third.close();
  });
});

describe('CrashSuspects hints that never come back', () => {
  it('expire: a job of the same id much later (a replay, a retry of an answered request) is not taken for the crashed one', () => {
    const path = join(tempDir('npu-fleet-crash-'), 'j.json');
    const longAgo = Date.now() - 24 * 3600_000;
    const recent = Date.now() - 60_000;
    const j = new InflightJournal(path);
    j.record([JSON.stringify([['q/req-1', 1, 0, longAgo], ['q/req-2', 0, 0, recent]])]);
    j.close();
    const next = new InflightJournal(path);
    const c = new CrashSuspects({ journal: next, hints: next.takeCrashHints(), transport: { markSuspect: () => Promise.resolve(true) }, log });
    expect(readInflightJournal(path)).toEqual({ batches: [[['q/req-2', 0, 0, recent]]] }); // not carried on
    expect(c.take(delivery('q/req-1'))).toBeUndefined();
    expect(c.take(delivery('q/req-2'))).toBeDefined();
    next.close();
  });
});
