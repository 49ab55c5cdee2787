import { MemoryDeadLetters } from '../../../src/transport/memory/memory-dead-letters.ts';
import { MemoryProducer } from '../../../src/producer/memory-producer.ts';
import { MemoryBroker } from '../../../src/transport/memory/memory-broker.ts';
import { MemoryTransport } from '../../../src/transport/memory/memory-transport.ts';
import { HEADERS } from '../../../src/transport/names.ts';
import type { Transport } from '../../../src/transport/transport.ts';
import { assertTransportConformance } from './conformance.ts';
import { sleep, type ConformanceHarness } from './conformance-kit.ts';

assertTransportConformance(async (): Promise<ConformanceHarness> => {
  const broker = new MemoryBroker();
  const unpublishable = 'conformance.failing.replies';
  broker.failSends(unpublishable);
  return {
    name: 'memory',
    createTransport: () => new MemoryTransport({ broker, prefetch: 64 }),
    createProducer: () => new MemoryProducer({ broker }),
    createDeadLetters: () => new MemoryDeadLetters(broker),
    deadLettersStay: false,
    crash: (t: Transport) => (t as MemoryTransport).abort(),
    async readDlq(model, count, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (broker.depth(`${model}.dlq`) < count && Date.now() < deadline) await sleep(10);
      return broker.peek(`${model}.dlq`).map((m) => ({ reason: m.headers[HEADERS.dlqReason] ?? '', message: m.headers[HEADERS.dlqMessage] ?? '', body: m.body }));
    },
    unpublishableReplyTo: unpublishable,
    garbage: new Uint8Array([0xde, 0xad, 0xbe, 0xef, 0x00, 0x01]),
    redeliveryTimeoutMs: 5_000,
    exactRedelivery: true,
    redeliveredFlag: true,
    cleanup: async () => {},
  };
});
