// Wire-level faults on a kafkajs consumer's group protocol, for the tests of consumers kafkajs
// leaves outside their group (kafka-lost-member, kafka-coordinator-not-found).
import type { Socket } from 'node:net';
import type { Kafka } from 'kafkajs';
import { sleep } from './conformance-kit.ts';
import { requestSniffingFactory } from './produce-sniffer.ts';

/** Kafka's api keys of the group requests these tests cut. */
export const API_KEYS = { findCoordinator: 10, joinGroup: 11 } as const;

/** A kafkajs socket factory that, once armed, cuts the connection carrying the next request of one api key. */
export class RequestBreaker {
  private armed = false;
  /** Requests whose connection was cut. */
  cut = 0;
  readonly socketFactory;

  constructor(name: keyof typeof API_KEYS) {
    const apiKey = API_KEYS[name];
    this.socketFactory = requestSniffingFactory(
      `RequestBreaker(${name})`,
      (request) => request.readInt16BE(4) === apiKey,
      (socket: Socket, matches, forward) => {
        if (!matches || !this.armed) return forward();
        this.armed = false;
        this.cut++;
        socket.destroy(new Error(`RequestBreaker: connection cut under a ${name} request`));
        return false;
      },
    );
  }

  arm(): void {
    this.armed = true;
  }

  disarm(): void {
    this.armed = false;
  }

  async untilCut(count: number, timeoutMs: number): Promise<void> {
    for (const until = Date.now() + timeoutMs; this.cut < count; ) {
      if (Date.now() > until) throw new Error(`fewer than ${count} connection(s) cut within ${timeoutMs} ms of arming`);
      await sleep(20);
    }
  }
}

/** The one member of `groupId` (the consumer under test) once the group is stable with it, as the broker has it. */
export async function onlyMember(kafka: Kafka, groupId: string, timeoutMs = 20_000): Promise<string> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    for (const until = Date.now() + timeoutMs; ; await sleep(200)) {
      const { groups } = await admin.describeGroups([groupId]);
      const members = groups[0]?.members ?? [];
      if (groups[0]?.state === 'Stable' && members.length === 1) return members[0]?.memberId as string;
      if (Date.now() > until) throw new Error(`group ${groupId} after ${timeoutMs} ms: ${groups[0]?.state} with ${members.length} members`);
    }
  } finally {
    await admin.disconnect();
  }
}
