import { readFileSync } from 'node:fs';
import { requestFromJson } from '../codec/index.ts';
import { loadFleetConfig } from '../contracts/config-loader.ts';
import type { CodecLimits } from '../contracts/limits.ts';
import type { ModelConfig } from '../contracts/model-config.ts';
import type { RequestEnvelope } from '../contracts/request-envelope.ts';
import type { ResultEnvelope } from '../contracts/result-envelope.ts';
import { FleetError } from '../errors/fleet-error.ts';
import { createProducer } from '../producer/index.ts';
import { prng, syntheticRequest } from '../runtime/demo-load.ts';
import { scanRepository } from '../runtime/model-repository.ts';
import { intOption, msOption, noPositionals, parseCommandArgs } from './cli-args.ts';

/**
 * `npu-fleet publish`: synthetic requests that fit the model's config (or one JSON request file),
 * fire-and-forget or request-and-await-reply. Prints one JSON line per reply when awaiting.
 */
export async function publishCommand(args: readonly string[]): Promise<number> {
  const parsed = parseCommandArgs('publish', args, {
    config: { type: 'string' },
    model: { type: 'string' },
    count: { type: 'string' },
    priority: { type: 'string' },
    'deadline-ms': { type: 'string' },
    await: { type: 'boolean', default: false },
    file: { type: 'string' },
    'timeout-ms': { type: 'string', default: '30000' },
    'reply-to': { type: 'string' },
  });
  if (parsed === undefined) return 0;
  const { values, positionals } = parsed;
  noPositionals('publish', positionals);
  // Every flag is checked before anything connects: a typo must not publish half a run.
  if (values.file !== undefined && (values.model !== undefined || values.count !== undefined)) {
    throw new FleetError('INVALID_ARGUMENT', '--file publishes the one request in the file; drop --model and --count');
  }
  const count = values.count === undefined ? 1 : intOption('count', values.count, 1, 1_000_000);
  const priority = values.priority === undefined ? undefined : intOption('priority', values.priority, 0);
  const deadlineMs = values['deadline-ms'] === undefined ? undefined : msOption('deadline-ms', values['deadline-ms']);
  const timeoutMs = msOption('timeout-ms', values['timeout-ms']);
  const config = loadFleetConfig({ file: values.config });
  if (config.transport.kind === 'memory') {
    throw new FleetError('INVALID_ARGUMENT', 'publish needs a Kafka or BullMQ transport in --config (the memory broker lives inside `npu-fleet start`)');
  }
  const requests: RequestEnvelope[] = [];
  // Priority levels by model, for the check below; the synthetic path has its model at hand.
  const levels = new Map<string, number | undefined>();
  if (values.file !== undefined) {
    requests.push(requestFromFile(values.file, config.limits));
  } else {
    if (!values.model) throw new FleetError('INVALID_ARGUMENT', '--model NAME is required (or --file REQUEST.json)');
    const model = findModel(config.modelRepository, values.model);
    if (!model) throw new FleetError('UNKNOWN_MODEL', `model ${values.model} is not in ${config.modelRepository}`);
    levels.set(model.name, model.priorityLevels);
    const rand = prng(Date.now());
    for (let i = 0; i < count; i++) requests.push(syntheticRequest(model, i, rand, { idPrefix: `cli-${process.pid}-${Date.now()}`, deadlineShare: 0 }));
  }
  for (const r of requests) {
    if (priority !== undefined) r.priority = priority;
    if (deadlineMs !== undefined) r.deadlineAt = Date.now() + deadlineMs;
    if (values['reply-to']) r.replyTo = values['reply-to'];
  }
  checkPriorities(requests, config.modelRepository, levels);
  const producer = createProducer(config.transport, { limits: config.limits });
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => (closing ??= producer.close());
  if (!values.await) {
    try {
      await producer.publish(requests);
      process.stdout.write(`published ${requests.length} request(s)\n`);
      return 0;
    } finally {
      await close();
    }
  }
  // Ctrl-C while waiting: close the producer (its private inbox topic / queue is removed, not left
  // behind) and say how far it got, instead of dying with the inbox still there.
  let interruptedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals): void => {
    interruptedBy = signal;
    void close();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    // Each result is printed as it arrives: a long run shows progress.
    const settled = await Promise.allSettled(
      requests.map(async (r) => {
        const result = await producer.request(r, { timeoutMs });
        process.stdout.write(`${resultLine(result)}\n`);
        return result;
      }),
    );
    const results = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    if (interruptedBy !== undefined) {
      process.stderr.write(
        `npu-fleet: interrupted by ${interruptedBy} after ${results.length} of ${requests.length} result(s); ` +
          'the others were published and may still be served, but their results will not be read here\n',
      );
      return 130;
    }
    const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failure !== undefined) throw failure.reason;
    return results.every((r) => r.status === 'ok') ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await close();
  }
}

function resultLine(r: ResultEnvelope): string {
  return JSON.stringify({
    id: r.id,
    status: r.status,
    version: r.version,
    late: r.late,
    timings: r.timings,
    batchSize: r.batchSize,
    gear: r.gear,
    device: r.device,
    error: r.error,
    outputs: r.outputs?.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape })),
  });
}

function requestFromFile(path: string, limits: CodecLimits): RequestEnvelope {
  try {
    return requestFromJson(readRequestFile(path), limits);
  } catch (err) {
    if (err instanceof FleetError && err.code !== 'INVALID_ARGUMENT') {
      throw new FleetError('INVALID_ARGUMENT', `--file ${path}: ${err.message}`, { cause: err, details: err.details });
    }
    throw err;
  }
}

function readRequestFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new FleetError('INVALID_ARGUMENT', `--file ${path} cannot be read (${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message})`, { cause });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new FleetError('INVALID_ARGUMENT', `--file ${path} is not JSON: ${(cause as Error).message}; it holds one request as JSON (README, "Commands")`, { cause });
  }
  // publish is the producer here: a request file need not carry createdAt (latency starts now).
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && (value as Record<string, unknown>).createdAt === undefined) {
    return { ...value, createdAt: Date.now() };
  }
  return value;
}

function findModel(repository: string, name: string): ModelConfig | undefined {
  return scanRepository(repository, { artifact: 'onnx', only: [name] }).models.get(name)?.config;
}

/**
 * On Kafka a priority past the model's levels lands on a topic no worker reads, so it is refused
 * here when the model's config is at hand (the repository may not exist where publish runs).
 */
function checkPriorities(requests: readonly RequestEnvelope[], repository: string, levels: Map<string, number | undefined>): void {
  for (const r of requests) {
    if (r.priority === undefined) continue;
    if (!levels.has(r.model)) {
      let found: number | undefined;
      try {
        found = findModel(repository, r.model)?.priorityLevels;
      } catch {
        found = undefined;
      }
      levels.set(r.model, found);
    }
    const n = levels.get(r.model);
    if (n !== undefined && r.priority >= n) {
      throw new FleetError('INVALID_ARGUMENT', `priority must be from 0 to ${n - 1}: model ${r.model} has ${n} priority levels, got ${r.priority}`, {
        details: { field: 'priority' },
      });
    }
  }
}
