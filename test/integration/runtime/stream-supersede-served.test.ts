// Latest frame wins also against a frame already served: a camera's frame that reaches the worker
// after a newer frame of its stream went to the device (a late packet, a publisher retry, a
// decoder thread that lagged) is answered rejected/SUPERSEDED without device time, not served
// after the newer one, which a consumer showing results as they come would display as a jump back
// in time. On a real Kafka and a real Redis (BullMQ), with the real simulator. Own file: the
// simulator reads its time model from the environment when it initialises.
import { afterEach, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { transportFor } from '../../../src/cli/worker-deps.ts';
import type { TransportSettingsSchema } from '../../../src/contracts/fleet-config.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { createProducer } from '../../../src/producer/index.ts';
import { runWorker } from '../../../src/runtime/worker-process.ts';
import { getServices, uniqueKafkaTransport, uniqueName } from '../../helpers/services.ts';
import { tagRecordingDevice } from '../../helpers/tag-recording-device.ts';
import { collectReplies, streamDropConfig } from './stream-drop-fleet.ts';

process.env['NPU_FLEET_DEVICE'] = 'sim';
process.env['NPU_FLEET_SIM_PROFILE'] = 'base=2ms,perItem=0ms';

const MODEL = 'mlp-classifier';
const FEATURES = 64;
const log = createLogger({ level: 'warn' });

const cleanup: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Frame `frame` of camera 0, made at t0 + frame; its first feature (the tag) is 1 + frame. */
function frameRequest(frame: number, replyTo: string, t0: number, stream = 'cam0'): RequestEnvelope {
  const features = new Float32Array(FEATURES).fill(0.5);
  features[0] = 1 + frame;
  return {
    id: `${stream}~${frame}`,
    model: MODEL,
    priority: 1,
    streamKey: stream,
    createdAt: t0 + frame,
    replyTo,
    inputs: [{ name: 'input', dtype: 'float32', shape: [1, FEATURES], data: new Uint8Array(features.buffer) }],
  };
}

const setups: Array<{ name: string; transport: () => z.input<typeof TransportSettingsSchema> }> = [
  { name: 'Kafka', transport: () => uniqueKafkaTransport('served') },
  { name: 'BullMQ', transport: () => ({ kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('served') } }) },
];

describe.each(setups)('streams.superseded: drop against a served frame on $name', (setup) => {
  it('answers a late older frame superseded, without device time, once a newer one was served', async () => {
    const config = streamDropConfig(setup.transport(), 'npu-fleet-served-');
    const executed = new Set<number>();
    const worker = await runWorker(config, 0, { artifact: 'onnx', openDevice: (id) => tagRecordingDevice(id, FEATURES, (tags) => tags.forEach((t) => executed.add(t))), createTransport: (c) => transportFor(c, log) }, { log, metricsPort: 0 });
    cleanup.push(() => worker.stop());
    const producer = createProducer(config.transport, { partitions: 4 });
    cleanup.push(() => producer.close());
    const replyTo = uniqueName('served-replies');
    const { results, arrival } = await collectReplies(producer, replyTo, cleanup);
    const answered = async (id: string): Promise<ResultEnvelope | undefined> => {
      for (const end = Date.now() + 30_000; !results.has(id) && Date.now() < end; ) await sleep(20);
      return results.get(id)?.[0];
    };
    const t0 = Date.now();

    // Frame 5 first: served (nothing of its stream is queued or known).
    await producer.publish([frameRequest(5, replyTo, t0)]);
    expect((await answered('cam0~5'))?.status).toBe('ok');
    // Frame 3 of the same camera arrives late, after frame 5 has been served.
    await producer.publish([frameRequest(3, replyTo, t0)]);
    const late = await answered('cam0~3');
    expect(late?.status, JSON.stringify(late?.error)).toBe('rejected');
    expect(late?.error?.code).toBe('SUPERSEDED');
    expect(late?.device).toBe(-1);
    expect(late?.error?.message).toMatch(/superseded by request cam0~5 of stream "cam0"/);
    expect(executed.has(1 + 3), 'the late frame reached the device').toBe(false);
    // The stream goes on: a newer frame, and another camera's older-made frame, are served.
    await producer.publish([frameRequest(6, replyTo, t0), frameRequest(1, replyTo, t0, 'cam1')]);
    expect((await answered('cam0~6'))?.status).toBe('ok');
    expect((await answered('cam1~1'))?.status).toBe('ok');
    await sleep(300);
    // One result each, and camera 0's ok results in frame order as they arrived.
    for (const [id, rs] of results) expect(rs, id).toHaveLength(1);
    expect(arrival.filter((r) => r.id.startsWith('cam0~') && r.status === 'ok').map((r) => r.id)).toEqual(['cam0~5', 'cam0~6']);
  }, 90_000);
});
