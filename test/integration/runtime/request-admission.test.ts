import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeRequest, requestToJson } from '../../../src/codec/index.ts';
import { parseFleetConfig } from '../../../src/contracts/config-loader.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import { openDevice, type Device } from '../../../src/device/index.ts';
import { createLogger } from '../../../src/observability/logger.ts';
import { ModelLanes } from '../../../src/runtime/model-lanes.ts';
import { scanRepository } from '../../../src/runtime/model-repository.ts';
import { admitDelivery, type Admission, type Payload } from '../../../src/runtime/request-admission.ts';
import type { Delivery } from '../../../src/transport/transport.ts';

// The real simulated device and the examples repository: a lane exists only for a model that loaded.
process.env.NPU_FLEET_DEVICE = 'sim';
const config = parseFleetConfig({ models: ['mlp-classifier'] });
let device: Device;
let lanes: ModelLanes<Payload>;

beforeAll(async () => {
  device = await openDevice(0);
  lanes = new ModelLanes<Payload>(device, createLogger({ level: 'silent' }), config);
  await lanes.apply(scanRepository('examples/models', { artifact: 'onnx', only: ['mlp-classifier'] }));
}, 60_000);
afterAll(async () => {
  await lanes.unloadAll();
  await device.close();
});

const NOW = 1_700_000_000_000;
const mlp = (extra: Partial<RequestEnvelope> = {}, rows = 2): RequestEnvelope => ({
  id: 'r1',
  model: 'mlp-classifier',
  createdAt: NOW - 5,
  replyTo: 'answers',
  inputs: [{ name: 'input', dtype: 'float32', shape: [rows, 64], data: new Uint8Array(rows * 64 * 4) }],
  ...extra,
});
const delivery = (body: Delivery['body'], suspectCount = 0): Delivery => ({ deliveryId: 'd1', model: 'mlp-classifier', priority: 1, body, receivedAt: NOW, redelivered: suspectCount > 0, suspectCount });
const admit = (body: Delivery['body'], running = true, suspectCount = 0): Admission =>
  admitDelivery(delivery(body, suspectCount), NOW, { limits: config.limits, running, lanes, maxHangsPerRequest: 2 });

describe('admitDelivery', () => {
  const answers: Array<{ name: string; body: () => Delivery['body']; status: string; code: string; dlq: boolean; id: string; replyTo?: string }> = [
    { name: 'garbage bytes', body: () => Buffer.from('not a frame'), status: 'invalid', code: 'INVALID_MESSAGE', dlq: true, id: '' },
    { name: 'an unknown model', body: () => encodeRequest(mlp({ model: 'nope' })), status: 'rejected', code: 'UNKNOWN_MODEL', dlq: true, id: 'r1', replyTo: 'answers' },
    { name: 'the wrong shape for the model', body: () => encodeRequest(mlp({ inputs: [{ name: 'input', dtype: 'float32', shape: [1, 3], data: new Uint8Array(12) }] })), status: 'invalid', code: 'INVALID_MESSAGE', dlq: true, id: 'r1', replyTo: 'answers' },
    { name: 'a deadline already past', body: () => encodeRequest(mlp({ deadlineAt: NOW - 1 })), status: 'expired', code: 'DEADLINE_EXCEEDED', dlq: false, id: 'r1', replyTo: 'answers' },
  ];
  for (const c of answers) {
    it(`answers ${c.name} at once: ${c.status} ${c.code}${c.dlq ? ' and a DLQ record' : ''}`, () => {
      const a = admit(c.body());
      if (a.kind !== 'answer') throw new Error(`expected an answer, got ${a.kind}`);
      expect(a.result.status).toBe(c.status);
      expect(a.result.error?.code).toBe(c.code);
      expect(a.dlq !== undefined).toBe(c.dlq);
      if (a.dlq) expect(a.dlq.reason).toBe(c.code);
      expect(a.identity.id).toBe(c.id);
      expect(a.replyTo).toBe(c.replyTo);
      expect(a.expired === true).toBe(c.status === 'expired');
    });
  }

  it('queues a valid frame with its priority, samples and held bytes (the frame itself)', () => {
    const body = encodeRequest(mlp({ priority: 2, deadlineAt: NOW + 50 }, 3));
    const a = admit(body);
    if (a.kind !== 'queue') throw new Error(`expected queue, got ${a.kind}`);
    expect(a.lane.config.name).toBe('mlp-classifier');
    expect(a.entry).toMatchObject({ id: 'r1', priority: 2, items: 3, arrivedAt: NOW, deadlineAt: NOW + 50, bytes: body.byteLength });
    expect(a.entry.payload.duplicates).toEqual([]);
  });

  it('counts decoded tensor bytes for a JSON body (BullMQ job data)', () => {
    const a = admit(requestToJson(mlp({}, 2)) as unknown as Record<string, unknown>);
    if (a.kind !== 'queue') throw new Error(`expected queue, got ${a.kind}`);
    expect(a.entry.bytes).toBe(2 * 64 * 4);
    expect(a.entry.priority).toBe(1); // the model's default
  });

  it('after one device hang a request runs alone; at worker.maxHangsPerRequest it is answered failed and dead-lettered, never run', () => {
    const body = encodeRequest(mlp());
    const fresh = admit(body, true, 0);
    const once = admit(body, true, 1);
    const twice = admit(body, true, 2);
    if (fresh.kind !== 'queue' || once.kind !== 'queue') throw new Error('expected both queued');
    expect(fresh.entry.alone).toBe(false);
    expect(once.entry.alone).toBe(true);
    if (twice.kind !== 'answer') throw new Error(`expected an answer, got ${twice.kind}`);
    expect(twice.result.status).toBe('failed');
    expect(twice.result.error?.code).toBe('DEVICE_HANG');
    expect(twice.result.error?.retriable).toBe(false);
    expect(twice.result.error?.message).toMatch(/hung or its worker died 2 times.*worker\.maxHangsPerRequest 2/);
    expect(twice.dlq?.reason).toBe('DEVICE_HANG');
    expect(twice.identity.id).toBe('r1');
  });

  it('gives a decodable request back when the worker no longer runs, but still answers garbage', () => {
    expect(admit(encodeRequest(mlp()), false).kind).toBe('release');
    expect(admit(Buffer.from('junk'), false).kind).toBe('answer');
  });
});
