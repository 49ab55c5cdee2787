import type { Kafka } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import type { TransportLogger } from '../../../../src/transport/kafka/kafka-client.ts';
import { predecessorMembers, predecessorMembersNote, removePredecessorMembers } from '../../../../src/transport/kafka/predecessor-members.ts';
import { predecessorNote as bullmqNote } from '../../../../src/transport/bullmq/lost-job-reclaimer.ts';

function recording(): { logger: TransportLogger; lines: Array<[string, string]> } {
  const lines: Array<[string, string]> = [];
  const at = (level: string) => (_obj: object, msg: string) => void lines.push([level, msg]);
  return { logger: { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') }, lines };
}

const member = { groupId: 'workers', memberId: 'npu-fleet-1b2c' };

/**
 * A Kafka client whose private cluster factory (the one removePredecessorMembers finds) makes a
 * cluster whose coordinator answers each LeaveGroup with the next of `answers` (an error to throw,
 * or undefined: removed).
 */
function fakeKafka(answers: Array<Error | undefined>, calls: string[]): Kafka {
  const cluster = {
    connect: async () => void calls.push('connect'),
    disconnect: async () => void calls.push('disconnect'),
    findGroupCoordinator: async ({ groupId }: { groupId: string }) => {
      calls.push(`find ${groupId}`);
      return {
        leaveGroup: async ({ memberId }: { groupId: string; memberId: string }) => {
          calls.push(`leave ${memberId}`);
          const answer = answers.shift();
          if (answer !== undefined) throw answer;
        },
      };
    },
  };
  return { [Symbol('private:Kafka:createCluster')]: () => cluster } as unknown as Kafka;
}

const kafkaError = (type: string, retriable: boolean): Error => Object.assign(new Error(type), { type, retriable });

describe('predecessor members note', () => {
  it('round-trips the group members of the consumers the transport runs', () => {
    const members = [member, { groupId: 'other', memberId: 'm-2' }];
    expect(predecessorMembers(predecessorMembersNote(members))).toEqual(members);
    expect(predecessorMembers(predecessorMembersNote([]))).toEqual([]);
  });

  it.each([
    ['no note', undefined],
    ['an empty note', ''],
    ['garbage', '\u0000{not json'],
    ['a torn note', predecessorMembersNote([member]).slice(0, 30)],
    ['JSON that is no object', '42'],
    ['null', 'null'],
    ['a BullMQ note (worker ids by queue)', bullmqNote([['model.requests', 'worker-1']])],
    ['an older note of another shape', JSON.stringify({ memberId: 'x', groupId: 'y' })],
    ['members that are not a list', JSON.stringify({ kafkaMembers: { groupId: 'g', memberId: 'm' } })],
  ])('%s names no member', (_what, note) => {
    expect(predecessorMembers(note)).toEqual([]);
  });

  it('keeps only well-formed entries, once each', () => {
    const note = JSON.stringify({ kafkaMembers: [member, null, 'm', { groupId: 'g' }, { groupId: 'g', memberId: 7 }, { groupId: '', memberId: 'm' }, member] });
    expect(predecessorMembers(note)).toEqual([member]);
  });
});

describe('removePredecessorMembers', () => {
  it('sends one LeaveGroup per member to its group coordinator and closes its connections', async () => {
    const calls: string[] = [];
    const second = { groupId: 'other', memberId: 'm-2' };
    expect(await removePredecessorMembers(fakeKafka([undefined, undefined], calls), [member, second], undefined)).toBe(2);
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual(['connect', 'find workers', `leave ${member.memberId}`, 'find other', 'leave m-2', 'disconnect']);
  });

  it('does nothing without members', async () => {
    const calls: string[] = [];
    expect(await removePredecessorMembers(fakeKafka([], calls), [], undefined)).toBe(0);
    expect(calls).toEqual([]);
  });

  it('a member already gone (UNKNOWN_MEMBER_ID) is no failure', async () => {
    const { logger, lines } = recording();
    expect(await removePredecessorMembers(fakeKafka([kafkaError('UNKNOWN_MEMBER_ID', false)], []), [member], logger)).toBe(0);
    expect(lines).toEqual([['info', expect.stringMatching(/no longer in its consumer group/)]]);
  });

  it('asks the coordinator again when it moved (a retriable answer), then gives up with a warning', async () => {
    const moved = kafkaError('NOT_COORDINATOR', true);
    const calls: string[] = [];
    expect(await removePredecessorMembers(fakeKafka([moved, undefined], calls), [member], undefined)).toBe(1);
    expect(calls.filter((c) => c.startsWith('find'))).toHaveLength(2);

    const { logger, lines } = recording();
    expect(await removePredecessorMembers(fakeKafka([moved, moved, moved, undefined], []), [member], logger)).toBe(0);
    expect(lines).toEqual([['warn', expect.stringMatching(/could not remove .* wait for its session to time out/)]]);
  });

  it('a refusal (authorization) only warns', async () => {
    const { logger, lines } = recording();
    expect(await removePredecessorMembers(fakeKafka([kafkaError('GROUP_AUTHORIZATION_FAILED', false)], []), [member], logger)).toBe(0);
    expect(lines.map(([level]) => level)).toEqual(['warn']);
  });

  it('a coordinator that never answers costs at most the time limit', async () => {
    const kafka = { [Symbol('private:Kafka:createCluster')]: () => ({ connect: () => new Promise(() => {}), disconnect: async () => {}, findGroupCoordinator: async () => ({}) }) } as unknown as Kafka;
    const { logger, lines } = recording();
    const startedAt = Date.now();
    expect(await removePredecessorMembers(kafka, [member], logger, 200)).toBe(0);
    expect(Date.now() - startedAt).toBeLessThan(2_000);
    expect(lines).toEqual([['warn', expect.stringMatching(/could not remove/)]]);
  });

  it('a kafkajs without the private cluster factory falls back with a warning', async () => {
    const { logger, lines } = recording();
    expect(await removePredecessorMembers({} as Kafka, [member], logger)).toBe(0);
    expect(lines).toEqual([['warn', expect.stringMatching(/offers no way to remove/)]]);
  });

  it('the real kafkajs client still has the private cluster factory it relies on', async () => {
    const { Kafka: RealKafka, logLevel } = await import('kafkajs');
    const kafka = new RealKafka({ clientId: 't', brokers: ['127.0.0.1:1'], retry: { retries: 0 }, logLevel: logLevel.NOTHING });
    const { logger, lines } = recording();
    // No broker there: the connect fails, which is a warning, not the "no way to remove" fallback.
    expect(await removePredecessorMembers(kafka, [member], logger, 5_000)).toBe(0);
    expect(lines).toEqual([['warn', expect.stringMatching(/could not remove the dead previous worker's group members/)]]);
  });
});
