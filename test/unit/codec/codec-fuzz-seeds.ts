/**
 * The codec fuzzer's seed corpus: valid requests and results of several models (every dtype,
 * meta, streamKey, deadlines, priority, version, replyTo, empty tensors) in both encodings, and
 * the frame split/join the mutators use to reach inside a frame's header.
 */
import { encodeRequestBinary, encodeRequestJson, encodeResultBinary, encodeResultJson } from '../../../src/codec/index.ts';
import type { RequestEnvelope } from '../../../src/contracts/request-envelope.ts';
import type { ResultEnvelope } from '../../../src/contracts/result-envelope.ts';
import { bytesOf, type Dtype, type Tensor } from '../../../src/contracts/tensor.ts';

function tensor(name: string, dtype: Dtype, shape: number[], fill: (i: number) => number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const make: Record<Dtype, () => ArrayBufferView> = {
    float32: () => Float32Array.from({ length: n }, (_, i) => fill(i)),
    float16: () => Uint16Array.from({ length: n }, (_, i) => fill(i) & 0xffff),
    int8: () => Int8Array.from({ length: n }, (_, i) => fill(i)),
    uint8: () => Uint8Array.from({ length: n }, (_, i) => fill(i)),
    int32: () => Int32Array.from({ length: n }, (_, i) => fill(i)),
    int64: () => BigInt64Array.from({ length: n }, (_, i) => BigInt(Math.trunc(fill(i)))),
    bool: () => Uint8Array.from({ length: n }, (_, i) => fill(i) & 1),
  };
  return { name, dtype, shape, data: bytesOf(make[dtype]()) };
}

const T0 = 1_767_225_600_000; // 2026-01-01, epoch ms

export const SEED_REQUESTS: readonly RequestEnvelope[] = [
  { id: 'img-1', model: 'resnet50', createdAt: T0, inputs: [tensor('image', 'float32', [1, 3, 4, 4], (i) => i / 7 - 3)] },
  {
    id: 'bert-42',
    model: 'bert-base',
    version: '3',
    priority: 0,
    createdAt: T0 + 5,
    deadlineAt: T0 + 105,
    replyTo: 'bert.replies',
    inputs: [
      tensor('input_ids', 'int64', [2, 8], (i) => 101 + i * 13),
      tensor('attention_mask', 'int64', [2, 8], (i) => (i % 8 < 6 ? 1 : 0)),
      tensor('token_type_ids', 'int8', [2, 8], () => 0),
    ],
  },
  {
    id: 'cam-7/frame-000123',
    model: 'yolo_v8.n',
    priority: 1,
    streamKey: 'cam-7',
    createdAt: T0 + 40,
    deadlineAt: T0 + 80,
    meta: { camera: 'cam-7', frame: 123, roi: [0, 0, 640, 480], tags: { site: 'Zürich', night: false }, note: null },
    inputs: [tensor('images', 'uint8', [1, 3, 2, 2], (i) => i * 21)],
  },
  {
    id: 'ü-😀-"quoted"\\',
    model: 'whisper.tiny',
    version: 'v2-beta',
    priority: 2,
    createdAt: T0,
    meta: { 'trace-id': '0af7651916cd43dd8448eb211c80319c', lang: 'de', '': 'empty key', '\u2028': 'line sep' },
    inputs: [tensor('mel', 'float16', [1, 4, 6], (i) => 0x3c00 + i), tensor('lengths', 'int32', [1], () => 6)],
  },
  {
    id: 'mask-0',
    model: 'classifier',
    createdAt: 0,
    deadlineAt: 8.64e15,
    priority: 15,
    inputs: [tensor('mask', 'bool', [4, 1], (i) => i), tensor('empty', 'float32', [4, 0], () => 0)],
  },
];

export const SEED_RESULTS: readonly ResultEnvelope[] = [
  {
    id: 'img-1',
    model: 'resnet50',
    version: '1',
    status: 'ok',
    timings: { queuedMs: 1.25, batchWaitMs: 0.5, deviceMs: 3.125, totalMs: 5 },
    batchSize: 3,
    gear: 4,
    device: 0,
    worker: 'host-1/dev0',
    completedAt: T0 + 5,
    outputs: [tensor('logits', 'float32', [1, 10], (i) => i - 5)],
  },
  {
    id: 'bert-42',
    model: 'bert-base',
    version: '3',
    status: 'ok',
    late: true,
    timings: { queuedMs: 0, batchWaitMs: 0, deviceMs: 0, totalMs: 0 },
    batchSize: 1,
    gear: 1,
    device: 1,
    worker: 'w',
    meta: { trace: 'x', n: 1 },
    outputs: [tensor('last_hidden', 'float16', [2, 2, 2], (i) => i), tensor('pooled', 'int64', [2, 1], (i) => -i)],
  },
  {
    id: '',
    model: 'yolo_v8.n',
    version: '',
    status: 'invalid',
    error: { code: 'INVALID_MESSAGE', message: 'invalid message: inputs[0].shape: shape rank must be at most 8 (give at most 8 items)' },
    timings: { queuedMs: 0, batchWaitMs: 0, deviceMs: 0, totalMs: 0 },
    batchSize: 0,
    gear: 0,
    device: -1,
    worker: 'host-2/dev3',
  },
  {
    id: 'cam-7/frame-000123',
    model: 'yolo_v8.n',
    version: '',
    status: 'expired',
    error: { code: 'DEADLINE_EXCEEDED', message: 'deadline passed 3 ms before the request reached a worker' },
    timings: { queuedMs: 43, batchWaitMs: 0, deviceMs: 0, totalMs: 43 },
    batchSize: 0,
    gear: 0,
    device: -1,
    worker: 'w',
    completedAt: T0 + 83,
    meta: { camera: 'cam-7', frame: 123 },
  },
  {
    id: 'x',
    model: 'classifier',
    version: '1',
    status: 'ok',
    timings: { queuedMs: 0.001, batchWaitMs: 0, deviceMs: 0, totalMs: 0.001 },
    batchSize: 4,
    gear: 4,
    device: 7,
    worker: 'w',
    outputs: [],
  },
];

export type Kind = 'request' | 'result';
export type Form = 'frame' | 'json';

export interface SeedInput {
  readonly kind: Kind;
  readonly form: Form;
  readonly bytes: Buffer;
}

export const SEED_INPUTS: readonly SeedInput[] = [
  ...SEED_REQUESTS.flatMap((r) => [
    { kind: 'request' as const, form: 'frame' as const, bytes: encodeRequestBinary(r) },
    { kind: 'request' as const, form: 'json' as const, bytes: encodeRequestJson(r) },
  ]),
  ...SEED_RESULTS.flatMap((r) => [
    { kind: 'result' as const, form: 'frame' as const, bytes: encodeResultBinary(r) },
    { kind: 'result' as const, form: 'json' as const, bytes: encodeResultJson(r) },
  ]),
];

// ─── frames ─────────────────────────────────────────────────────────────────────────────────────

export interface SplitFrame {
  readonly prefix: Buffer;
  readonly header: string;
  /** Everything after the header's padding: the tensors' bytes. */
  readonly tail: Buffer;
}

export function splitFrame(frame: Buffer): SplitFrame {
  const headerBytes = frame.readUInt32LE(8);
  const start = (12 + headerBytes + 7) & ~7;
  return { prefix: frame.subarray(0, 12), header: frame.toString('utf8', 12, 12 + headerBytes), tail: frame.subarray(start) };
}

/** A frame around `header` with the prefix's magic, version and kind, its length field right. */
export function joinFrame(prefix: Buffer, header: string, tail: Uint8Array): Buffer {
  const json = Buffer.from(header, 'utf8');
  const start = (12 + json.byteLength + 7) & ~7;
  const out = Buffer.alloc(start + tail.byteLength);
  prefix.copy(out, 0, 0, 12);
  out.writeUInt32LE(json.byteLength, 8);
  json.copy(out, 12);
  out.set(tail, start);
  return out;
}
