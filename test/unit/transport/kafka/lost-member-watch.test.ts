import { describe, expect, it } from 'vitest';
import { MembershipWatch } from '../../../../src/transport/kafka/lost-member-watch.ts';

const HEARTBEAT_MS = 1_600;
const SESSION_MS = 8_000;
/** Epoch ms the tests start at (0 is "never joined"). */
const T0 = 1_000_000;

/** A fetch loop answering every `everyMs` from `fromMs` to `toMs`, heartbeating every HEARTBEAT_MS if `heartbeats`. */
function fetchLoop(w: MembershipWatch, fromMs: number, toMs: number, everyMs: number, heartbeats: boolean): void {
  let lastHeartbeat = fromMs;
  for (let t = fromMs; t <= toMs; t += everyMs) {
    w.onFetch(t);
    if (heartbeats && t - lastHeartbeat >= HEARTBEAT_MS) {
      w.onMember(t);
      lastHeartbeat = t;
    }
  }
}

describe('MembershipWatch', () => {
  it('lost after 3 heartbeat intervals (at least 5 s, at most the session) of fetches with no heartbeat', () => {
    expect(new MembershipWatch(HEARTBEAT_MS, SESSION_MS).lostAfterMs).toBe(5_000);
    expect(new MembershipWatch(3_000, 30_000).lostAfterMs).toBe(9_000);
    expect(new MembershipWatch(3_000, 6_000).lostAfterMs).toBe(6_000);
  });

  it('a fetch loop that skips its heartbeats (kafkajs without a member id) is lost once lostAfterMs passed', () => {
    const w = new MembershipWatch(HEARTBEAT_MS, SESSION_MS);
    w.onMember(T0);
    fetchLoop(w, T0 + 100, T0 + 5_000, 100, false);
    expect(w.lost(T0 + 5_000)).toBe(false);
    fetchLoop(w, T0 + 5_100, T0 + 5_100, 100, false);
    expect(w.lost(T0 + 5_100)).toBe(true);
  });

  it('a fetch loop that heartbeats is never lost, busy or idle', () => {
    const w = new MembershipWatch(HEARTBEAT_MS, SESSION_MS);
    w.onMember(T0);
    fetchLoop(w, T0 + 100, T0 + 60_000, 100, true);
    expect(w.lost(T0 + 60_000)).toBe(false);
  });

  it('no fetches (a rejoin or a long batch under way, the broker away): not lost, however long without a heartbeat', () => {
    const w = new MembershipWatch(HEARTBEAT_MS, SESSION_MS);
    w.onMember(T0);
    fetchLoop(w, T0 + 100, T0 + 2_000, 100, false);
    expect(w.lost(T0 + 60_000)).toBe(false);
  });

  it('fetches that stopped a while ago do not count: the loop is not running now', () => {
    const w = new MembershipWatch(HEARTBEAT_MS, SESSION_MS);
    w.onMember(T0);
    fetchLoop(w, T0 + 2_000, T0 + 4_000, 100, false);
    expect(w.lost(T0 + 10_000)).toBe(false);
  });

  it('before the first join nothing is lost; a join or a heartbeat starts the clock again', () => {
    const w = new MembershipWatch(HEARTBEAT_MS, SESSION_MS);
    fetchLoop(w, T0 + 0, T0 + 20_000, 100, false);
    expect(w.lost(T0 + 20_000)).toBe(false);
    w.onMember(T0 + 20_000);
    fetchLoop(w, T0 + 20_100, T0 + 26_000, 100, false);
    expect(w.lost(T0 + 26_000)).toBe(true);
    w.onMember(T0 + 26_000);
    expect(w.lost(T0 + 26_000)).toBe(false);
  });

  it('a suspicion holds from lost() until the next join, whatever the fetches and the restart do meanwhile', () => {
    const w = new MembershipWatch(HEARTBEAT_MS, SESSION_MS);
    w.onMember(T0);
    fetchLoop(w, T0 + 100, T0 + 5_000, 100, false);
    expect(w.suspect(T0 + 5_000)).toBe(false);
    expect(w.suspicion).toBeUndefined();
    fetchLoop(w, T0 + 5_100, T0 + 5_100, 100, false);
    expect(w.suspect(T0 + 5_100)).toBe(true);
    expect(w.suspect(T0 + 5_200)).toBe(false);
    expect(w.suspicion).toEqual({ lastMemberAt: T0, suspectedAt: T0 + 5_100 });
    // The restart stops the fetches and starts the clock again: still outside the group.
    w.onMember(T0 + 6_000);
    expect(w.lost(T0 + 20_000)).toBe(false);
    expect(w.suspicion).toEqual({ lastMemberAt: T0, suspectedAt: T0 + 5_100 });
    expect(w.onJoin(T0 + 20_000)).toEqual({ lastMemberAt: T0, suspectedAt: T0 + 5_100 });
    expect(w.suspicion).toBeUndefined();
    expect(w.onJoin(T0 + 21_000)).toBeUndefined();
  });

  it('a rebalance (no fetches while it rejoins) is no suspicion, however long', () => {
    const w = new MembershipWatch(HEARTBEAT_MS, SESSION_MS);
    w.onMember(T0);
    fetchLoop(w, T0 + 100, T0 + 1_500, 100, true);
    for (let t = T0 + 1_600; t <= T0 + 30_000; t += 100) expect(w.suspect(t)).toBe(false);
    w.onJoin(T0 + 30_000);
    fetchLoop(w, T0 + 30_100, T0 + 60_000, 100, true);
    expect(w.suspect(T0 + 60_000)).toBe(false);
  });
});
