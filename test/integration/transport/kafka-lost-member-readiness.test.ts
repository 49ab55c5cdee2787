// What /readyz says while the worker's request consumer is outside its group (kafkajs 2.2.4 fetching
// on without a member id after a refused rejoin, see kafka-lost-member.test.ts): not ready from the
// moment LostMemberRestarter suspects it (fetches answered, no heartbeat nor join for its window)
// through the restart, ready again once the consumer has joined with an assignment. Its fetches are
// answered all along, so the contact window alone never saw it. Made on the wire as there: the group
// forgets the member (LeaveGroup in its name) and the connection of its next JoinGroup is cut.
import { describe, expect, it } from 'vitest';
import { workerReadiness } from '../../../src/runtime/worker-health.ts';
import type { TransportLogger } from '../../../src/transport/kafka/kafka-client.ts';
import { KafkaTransport } from '../../../src/transport/kafka/kafka-transport.ts';
import { removePredecessorMembers } from '../../../src/transport/kafka/predecessor-members.ts';
import { closeAfterEach } from '../../helpers/close-after-each.ts';
import { uniqueName } from '../../helpers/services.ts';
import { Inbox, makeRequest, sleep, startWith } from './conformance-kit.ts';
import { KafkaProducer } from '../../../src/producer/kafka-producer.ts';
import { adminKafka, kafkaSettings } from './kafka-harness.ts';
import { onlyMember, RequestBreaker } from './group-request-breaker.ts';

const track = closeAfterEach();
const PROBE_EVERY_MS = 20;

interface Turn {
  readonly atMs: number;
  readonly ready: boolean;
}

/** Judges the transport every PROBE_EVERY_MS as a running worker's /readyz does, and keeps each change and each reason given. */
class ReadinessProbe {
  readonly turns: Turn[] = [];
  readonly reasons = new Set<string>();
  private timer: NodeJS.Timeout;

  constructor(private readonly t: KafkaTransport) {
    this.look();
    this.timer = setInterval(() => this.look(), PROBE_EVERY_MS);
  }

  private look(): void {
    const brokerConnected = this.t.connected();
    const judged = workerReadiness({
      state: 'running',
      brokerConnected,
      brokerUnreadyReason: brokerConnected ? undefined : this.t.unreadyReason(),
      failing: undefined,
      hangLimitMs: 60_000,
    });
    if (!judged.ready) this.reasons.add(judged.reason);
    if (this.turns.at(-1)?.ready !== judged.ready) this.turns.push({ atMs: Date.now(), ready: judged.ready });
  }

  get ready(): boolean {
    return this.turns.at(-1)?.ready === true;
  }

  async until(ready: boolean, timeoutMs: number): Promise<number | undefined> {
    for (const until = Date.now() + timeoutMs; Date.now() < until; await sleep(PROBE_EVERY_MS)) {
      const turn = this.turns.at(-1);
      if (turn?.ready === ready) return turn.atMs;
    }
    return undefined;
  }

  close(): void {
    clearInterval(this.timer);
  }
}

/** The transport's log lines, with when they came. */
class LogLines implements TransportLogger {
  readonly lines: Array<{ atMs: number; msg: string }> = [];
  error = (_: object, msg: string): void => void this.lines.push({ atMs: Date.now(), msg });
  warn = this.error;
  info = this.error;
  debug = (): void => undefined;

  /** When the first line matching `pattern` came. */
  at(pattern: RegExp): number | undefined {
    return this.lines.find((l) => pattern.test(l.msg))?.atMs;
  }
}

const RESTART_LINE = /^the kafka consumer of the request topics fetches but has sent no heartbeat .* outside its group since .*; restarting it$/;
const JOINED_LINE = /^the kafka consumer of the request topics joined its group again/;

/** A started transport (one partition per request topic) whose JoinGroup connections `breaker` may cut. */
async function worker(name: string) {
  const settings = kafkaSettings({ sessionTimeoutMs: 6_000 });
  const model = uniqueName(name).replace(/-/g, '');
  const breaker = new RequestBreaker('joinGroup');
  const logs = new LogLines();
  const t = track(new KafkaTransport(settings, { partitions: 1, socketFactory: breaker.socketFactory, logger: logs }));
  const inbox = new Inbox();
  await startWith(t, model, inbox);
  await onlyMember(adminKafka(), settings.groupId, 20_000);
  const probe = new ReadinessProbe(t);
  track({ close: async () => probe.close() });
  return { settings, model, breaker, logs, t, inbox, probe };
}

/**
 * After the member was forgotten and its rejoin cut: when the probe turned unready, or, if it did
 * not within `timeoutMs`, what the group looks like (backOnItsOwn: stable again with one member
 * other than `lostMemberId`, the consumer never restarted by the watch).
 */
async function outsideOrBack(
  w: Awaited<ReturnType<typeof worker>>,
  lostMemberId: string,
  timeoutMs: number,
): Promise<{ unreadyAt?: number; backOnItsOwn: boolean; state: string }> {
  const admin = adminKafka().admin();
  await admin.connect();
  try {
    let state = 'not described';
    let backOnItsOwn = false;
    for (const until = Date.now() + timeoutMs; Date.now() < until; await sleep(250)) {
      const unreadyAt = w.probe.turns.find((t) => !t.ready)?.atMs;
      if (unreadyAt !== undefined) return { unreadyAt, backOnItsOwn: false, state };
      const [g] = (await admin.describeGroups([w.settings.groupId])).groups;
      const members = g?.members.map((m) => m.memberId) ?? [];
      state = `group ${g?.state ?? 'unknown'} with members ${JSON.stringify(members)} (lost ${lostMemberId}), restart logged ${w.logs.at(RESTART_LINE) !== undefined}`;
      backOnItsOwn = g?.state === 'Stable' && members.length === 1 && members[0] !== lostMemberId && w.logs.at(RESTART_LINE) === undefined;
      // Nobody else is in this group: a new member there, not restarted by the watch, is the consumer back by itself.
      if (backOnItsOwn) return { backOnItsOwn, state };
    }
    return { backOnItsOwn, state };
  } finally {
    await admin.disconnect();
  }
}

/**
 * The group forgets the worker's member and its one rejoin is cut (and with `restartCut`, the join
 * of the restart too: kafkajs crashes that run and restarts it itself). Checks what the probe saw
 * and returns the figures, in ms.
 */
async function loseMember(w: Awaited<ReturnType<typeof worker>>, restartCut: boolean): Promise<string> {
  expect(w.probe.ready).toBe(true);
  const kafka = adminKafka();
  let cutAt = 0;
  let unreadyAt: number | undefined;
  for (let attempt = 1; unreadyAt === undefined; attempt++) {
    const memberId = await onlyMember(kafka, w.settings.groupId, 20_000);
    const cutsBefore = w.breaker.cut;
    w.breaker.arm();
    expect(await removePredecessorMembers(kafka, [{ groupId: w.settings.groupId, memberId }], undefined)).toBe(1);
    await w.breaker.untilCut(cutsBefore + 1, 20_000);
    cutAt = Date.now();
    if (restartCut) w.breaker.arm();
    const seen = await outsideOrBack(w, memberId, 20_000);
    unreadyAt = seen.unreadyAt;
    if (unreadyAt !== undefined) break;
    // The fault did not take: kafkajs's retry of the cut join (or its own restart) got the consumer
    // back into its group by itself, so it was never outside it. Seen once in a loaded CI run; not
    // what this test is about, so the group forgets the member again. Anything else fails.
    w.breaker.disarm();
    if (seen.backOnItsOwn && attempt < 3) {
      console.log(`[lost member readiness] attempt ${attempt}: ${seen.state}; the fault did not take, making it again`);
      continue;
    }
    expect.fail(`readiness stayed true while the request consumer fetched outside its group (attempt ${attempt}): ${seen.state}; readiness turns ${JSON.stringify(w.probe.turns)}; transport log ${JSON.stringify(w.logs.lines.slice(-12))}`);
  }
  // Rejoined under a new member id by the restart; ready again only after that join.
  await onlyMember(adminKafka(), w.settings.groupId, 30_000);
  const readyAgainAt = await w.probe.until(true, 10_000);
  expect(readyAgainAt, 'ready again once the consumer joined').toBeDefined();
  const restartLoggedAt = w.logs.at(RESTART_LINE);
  const joinedLoggedAt = w.logs.at(JOINED_LINE);
  expect(restartLoggedAt, 'the restart logged, naming since when the consumer is outside its group').toBeDefined();
  expect(joinedLoggedAt, 'the join that ends it logged').toBeDefined();

  // One stretch, no flapping: ready up to the suspicion, unready through the restart, ready after.
  expect(w.probe.turns.map((t) => t.ready)).toEqual([true, false, true]);
  // Suspected within the watch's window (5 s here) of the heartbeat that found the member gone;
  // unready from the suspicion (the restart, logged on the JS turn that suspects it unless a probe
  // saw it first: seen at the latest on the probe after, give or take a busy event loop), ready
  // no earlier than the join (logged on the JS turn that ends the suspicion).
  expect(unreadyAt! - cutAt).toBeLessThan(5_000 + 3_000);
  expect(unreadyAt! - restartLoggedAt!).toBeLessThanOrEqual(PROBE_EVERY_MS + 250);
  expect(readyAgainAt!).toBeGreaterThanOrEqual(joinedLoggedAt!);
  // Why, in the /readyz body: never the generic "broker unreachable" (its fetches were answered).
  const reasons = [...w.probe.reasons];
  expect(reasons.length).toBeGreaterThan(0);
  for (const reason of reasons) {
    expect(reason).toMatch(/^kafka request consumer outside its group since \d{4}-\d\d-\d\dT[\d:.]+Z \(fetches answered, no heartbeat\), (restarting it|restarted, rejoining)$/);
  }
  expect(w.t.unreadyReason()).toBeUndefined();

  const producer = track(new KafkaProducer(w.settings, { partitions: 1 }));
  await producer.publish([makeRequest(w.model, 'after', 0)]);
  await w.inbox.waitFor(1, 20_000);
  return (
    `cut→unready ${unreadyAt! - cutAt} ms, unready→restart logged ${restartLoggedAt! - unreadyAt!} ms, unready→ready ${readyAgainAt! - unreadyAt!} ms, ` +
    `joined logged→ready ${readyAgainAt! - joinedLoggedAt!} ms; reasons ${JSON.stringify(reasons)}`
  );
}

describe('kafka transport readiness: a request consumer outside its group', () => {
  it('unready from the suspicion through the restart, ready again once joined with an assignment', async () => {
    const w = await worker('lostready');
    console.log(`[lost member readiness] ${await loseMember(w, false)}`);
  }, 120_000);

  it("the join of the restart cut too: unready until kafkajs's own restart of that run has joined", async () => {
    const w = await worker('lostreadyagain');
    console.log(`[lost member readiness, restart's join cut] ${await loseMember(w, true)}`);
  }, 120_000);

  it('an ordinary rebalance (a member joining, then leaving) does not make it unready', async () => {
    const w = await worker('rebalready');
    const other = adminKafka().consumer({ groupId: w.settings.groupId, sessionTimeout: 6_000, heartbeatInterval: 1_000 });
    await other.connect();
    track({ close: () => other.disconnect() });
    await other.subscribe({ topics: [`${w.model}.requests.p0`] });
    await other.run({ eachMessage: async () => undefined });
    const admin = adminKafka().admin();
    await admin.connect();
    track({ close: () => admin.disconnect() });
    const stableWith = async (members: number): Promise<void> => {
      for (const until = Date.now() + 20_000; ; await sleep(200)) {
        const [g] = (await admin.describeGroups([w.settings.groupId])).groups;
        if (g?.state === 'Stable' && g.members.length === members) return;
        if (Date.now() > until) throw new Error(`group not stable with ${members} members: ${g?.state} ${g?.members.length}`);
      }
    };
    await stableWith(2);
    await other.disconnect();
    await stableWith(1);
    await sleep(2_000);
    expect(w.probe.turns.map((t) => t.ready), 'ready throughout both rebalances').toEqual([true]);
  }, 90_000);
});
