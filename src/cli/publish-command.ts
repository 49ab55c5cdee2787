import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { requestFromJson } from '../codec/index.ts';
import { loadFleetConfig } from '../contracts/config-loader.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { createProducer } from '../producer/index.ts';
import { prng, syntheticRequest } from '../runtime/demo-load.ts';
import { scanRepository } from '../runtime/model-repository.ts';

/**
 * `npu-fleet publish`: synthetic requests that fit the model's config (or one JSON request file),
 * fire-and-forget or request-and-await-reply. Prints one JSON line per reply when awaiting.
 */
export async function publishCommand(args: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...args],
    options: {
      config: { type: 'string' },
      model: { type: 'string' },
      count: { type: 'string', default: '1' },
      priority: { type: 'string' },
      'deadline-ms': { type: 'string' },
      await: { type: 'boolean', default: false },
      file: { type: 'string' },
      'timeout-ms': { type: 'string', default: '30000' },
      'reply-to': { type: 'string' },
    },
  });
  const config = loadFleetConfig({ file: values.config });
  if (config.transport.kind === 'memory') {
    throw new FleetError('INVALID_ARGUMENT', 'publish needs a Kafka or BullMQ transport in --config (the memory broker lives inside `npu-fleet start`)');
  }
  const requests: RequestEnvelope[] = [];
  if (values.file) {
    requests.push(requestFromJson(JSON.parse(readFileSync(values.file, 'utf8')) as unknown, config.limits));
  } else {
    if (!values.model) throw new FleetError('INVALID_ARGUMENT', '--model NAME is required (or --file REQUEST.json)');
    const snapshot = scanRepository(config.modelRepository, { artifact: 'onnx', only: [values.model] });
    const model = snapshot.models.get(values.model)?.config;
    if (!model) throw new FleetError('UNKNOWN_MODEL', `model ${values.model} is not in ${snapshot.dir}`);
    const rand = prng(Date.now());
    const count = Number(values.count);
    for (let i = 0; i < count; i++) {
      const r = syntheticRequest(model, i, rand, { idPrefix: `cli-${process.pid}-${Date.now()}`, deadlineShare: 0 });
      if (values.priority !== undefined) r.priority = Number(values.priority);
      if (values['deadline-ms'] !== undefined) r.deadlineAt = Date.now() + Number(values['deadline-ms']);
      if (values['reply-to']) r.replyTo = values['reply-to'];
      requests.push(r);
    }
  }
  const producer = createProducer(config.transport, { limits: config.limits });
  try {
    if (!values.await) {
      await producer.publish(requests);
      process.stdout.write(`published ${requests.length} request(s)\n`);
      return 0;
    }
    const timeoutMs = Number(values['timeout-ms']);
    const results = await Promise.all(requests.map((r) => producer.request(r, { timeoutMs })));
    for (const r of results) {
      process.stdout.write(
        `${JSON.stringify({ id: r.id, status: r.status, version: r.version, late: r.late, timings: r.timings, batchSize: r.batchSize, gear: r.gear, device: r.device, error: r.error, outputs: r.outputs?.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape })) })}\n`,
      );
    }
    return results.every((r) => r.status === 'ok') ? 0 : 1;
  } finally {
    await producer.close();
  }
}
