import { describe, expect, it } from 'vitest';
import { GroupLease } from '../../../../src/transport/kafka/group-lease.ts';

const SESSION_MS = 6_000;
/** Epoch ms the tests start at (0 is "never confirmed"). */
const T0 = 1_000_000;

describe('GroupLease', () => {
  it('not held before the first join', () => {
    const lease = new GroupLease(SESSION_MS, 2_400);
    lease.onRequest('Heartbeat', T0);
    expect(lease.held(T0 + 1)).toBe(false);
  });

  it('held for half a session from the send of the SyncGroup of a join, then of each heartbeat answered without error', () => {
    const lease = new GroupLease(SESSION_MS, 2_400);
    lease.onRequest('JoinGroup', T0);
    lease.onRequest('SyncGroup', T0 + 100);
    lease.onJoin();
    expect(lease.held(T0 + 100 + 2_999)).toBe(true);
    expect(lease.held(T0 + 100 + 3_000)).toBe(false);
    lease.onRequest('Heartbeat', T0 + 2_000);
    lease.onHeartbeat();
    expect(lease.held(T0 + 4_999)).toBe(true);
    expect(lease.held(T0 + 5_000)).toBe(false);
  });

  it('a heartbeat answered with an error (UNKNOWN_MEMBER_ID) does not renew it', () => {
    const lease = new GroupLease(SESSION_MS, 2_400);
    lease.onRequest('SyncGroup', T0);
    lease.onJoin();
    // Answered, no HEARTBEAT event: kafkajs threw on its error code.
    lease.onRequest('Heartbeat', T0 + 2_500);
    expect(lease.held(T0 + 3_500)).toBe(false);
  });

  it('counts from the send, not the answer: a heartbeat sent before a stall and answered after it renews nothing past its send', () => {
    const lease = new GroupLease(SESSION_MS, 2_400);
    lease.onRequest('SyncGroup', T0);
    lease.onJoin();
    // Sent at T0 + 1 s, the process stalled for 10 s, the answer read after.
    lease.onRequest('Heartbeat', T0 + 1_000);
    lease.onHeartbeat();
    expect(lease.held(T0 + 11_000)).toBe(false);
  });

  it('an older send answered later does not move it back', () => {
    const lease = new GroupLease(SESSION_MS, 2_400);
    lease.onRequest('Heartbeat', T0 + 2_000);
    lease.onHeartbeat();
    lease.onRequest('SyncGroup', T0);
    lease.onJoin();
    expect(lease.held(T0 + 4_999)).toBe(true);
  });
});
