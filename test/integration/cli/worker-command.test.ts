import { spawnCli } from '../../helpers/spawn-cli.ts';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { getServices, uniqueName } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';
import { alive } from '../../helpers/until.ts';
import { hungModelRepo } from '../../helpers/hung-model-repo.ts';
import { BullmqProducer } from '../../../src/producer/bullmq-producer.ts';
import { EXIT_HANG, EXIT_START_TIMEOUT } from '../../../src/runtime/worker-process.ts';
import { makeRequest } from '../transport/conformance-kit.ts';
import { bullmqSettings } from '../transport/bullmq-harness.ts';

/** `npu-fleet worker --device 0` on a config file, its stdout and stderr gathered as one text. */
function spawnWorker(configFile: string, env: Record<string, string> = {}) {
  return spawnCli(['worker', '--device', '0', '--config', configFile], { NPU_FLEET_DEVICE: 'sim', ...env });
}

/** A BullMQ worker on a simulator with `faults` (worker.hangLimitMs 1 s unless given; `env` added), once ready; a producer and an input for it. */
async function readyWorkerWithFaults(prefixName: string, faults: string, hangLimitMs = 1_000, env: Record<string, string> = {}) {
  const dir = tempDir('npu-fleet-worker-');
  const configFile = join(dir, 'fleet.yaml');
  const prefix = uniqueName(prefixName);
  writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } }, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0, hangLimitMs } }));
  const worker = spawnWorker(configFile, { NODE_OPTIONS: '--max-semi-space-size=16', NPU_FLEET_SIM_FAULTS: faults, ...env });
  const producer = new BullmqProducer(bullmqSettings({ prefix }));
  const deadline = Date.now() + 30_000;
  while (!worker.output().includes('worker ready') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  if (!worker.output().includes('worker ready')) {
    worker.child.kill('SIGKILL');
    await producer.close();
  }
  expect(worker.output()).toContain('worker ready');
  const input = { name: 'input', dtype: 'float32' as const, shape: [1, 64], data: new Uint8Array(64 * 4) };
  return { ...worker, producer, input };
}

/** `npu-fleet worker` as a process: what a supervisor or Kubernetes sees of it. */
describe('npu-fleet worker', () => {
  it('SIGTERM while start-up waits for an unreachable broker exits 0 at once (nothing to drain), not by the signal', async () => {
    const dir = tempDir('npu-fleet-worker-');
    const configFile = join(dir, 'fleet.yaml');
    // Port 1 refuses connections: start-up waits in the Redis check (15 s) until the signal.
    writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://127.0.0.1:1' } }, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 } }));
    // Started on its own without the worker's V8 flag: it runs, and says how to give it.
    const { child, exited, output } = spawnWorker(configFile, { NODE_OPTIONS: '' });
    const deadline = Date.now() + 20_000;
    while (!output().includes('model version loaded') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(output(), 'start-up reached the broker check').toContain('model version loaded');
    const signalledAt = Date.now();
    child.kill('SIGTERM');
    const result = await Promise.race([exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 5_000))]);
    if (result === 'slow') child.kill('SIGKILL');
    expect(result, output()).toEqual({ code: 0, signal: null });
    expect(Date.now() - signalledAt).toBeLessThan(5_000);
    expect(output()).toContain('stopped during start-up; nothing to drain');
    expect(output()).toContain('worker runs without --max-semi-space-size=16 (worker.maxSemiSpaceMb)');
    expect(output()).toContain('NODE_OPTIONS=--max-semi-space-size=16');
  }, 60_000);

  it('SIGHUP (a terminal hangup, kill -HUP) drains a ready worker and exits 0, as SIGTERM does, instead of ending it mid-batch', async () => {
    // The first batch takes 3 s longer: it is on the device when the signal comes.
    const { child, exited, output, producer, input } = await readyWorkerWithFaults('hangup', 'slow@1:3000ms', 30_000);
    const results = new Map<string, string>();
    try {
      const replyTo = uniqueName('hangup-replies');
      await producer.subscribeReplies(replyTo, (r) => results.set(r.id, r.status));
      await producer.publish([makeRequest('mlp-classifier', 'hup', 0, { replyTo, inputs: [input] })]);
      await new Promise((r) => setTimeout(r, 1000));
      expect(results.size, 'answered before the signal: the batch was not slow').toBe(0);
      child.kill('SIGHUP');
      const result = await Promise.race([exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 20_000))]);
      if (result === 'slow') child.kill('SIGKILL');
      expect(result, output()).toEqual({ code: 0, signal: null });
      expect(output()).toContain('"signal":"SIGHUP","msg":"draining"');
      const deadline = Date.now() + 10_000;
      while (results.size === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect([...results.values()]).toEqual(['ok']);
    } finally {
      await producer.close();
    }
  }, 60_000);

  it('a terminal hangup (the worker on a pty whose other end closes) drains and exits, though its logs can no longer be written', async () => {
    const dir = tempDir('npu-fleet-worker-');
    const configFile = join(dir, 'fleet.yaml');
    const prefix = uniqueName('tty-hangup');
    writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix } }, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 } }));
    // script(1) gives the worker a pty as its terminal (stdin, stdout, stderr); SIGKILLing script closes the pty's other end.
    const term = spawn('script', ['-qfec', `exec ${process.execPath} bin/npu-fleet.js worker --device 0 --config ${configFile}`, '/dev/null'], {
      env: { ...process.env, NPU_FLEET_DEVICE: 'sim', NODE_OPTIONS: '--max-semi-space-size=16', NPU_FLEET_SIM_FAULTS: 'slow@1:3000ms' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    term.stdout.on('data', (b: Buffer) => (out += b.toString()));
    const producer = new BullmqProducer(bullmqSettings({ prefix }));
    const results = new Map<string, string>();
    let workerPid: number | undefined;
    try {
      const deadline = Date.now() + 30_000;
      while (!out.includes('worker ready') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(out).toContain('worker ready');
      workerPid = Number(readFileSync(`/proc/${term.pid}/task/${term.pid}/children`, 'utf8').trim().split(' ')[0]);
      expect(readFileSync(`/proc/${workerPid}/cmdline`, 'utf8')).toContain('worker');
      const replyTo = uniqueName('tty-hangup-replies');
      await producer.subscribeReplies(replyTo, (r) => results.set(r.id, r.status));
      const input = { name: 'input', dtype: 'float32' as const, shape: [1, 64], data: new Uint8Array(64 * 4) };
      await producer.publish([makeRequest('mlp-classifier', 'hangup', 0, { replyTo, inputs: [input] })]);
      await new Promise((r) => setTimeout(r, 1000));
      expect(results.size, 'answered before the hangup: the batch was not slow').toBe(0);
      term.kill('SIGKILL');
      const pid = workerPid;
      const goneBy = Date.now() + 15_000;
      while (alive(pid) && Date.now() < goneBy) await new Promise((r) => setTimeout(r, 100));
      // It used to log its first drain line to the dead terminal (EIO), crash on it, and retry that write at exit for good.
      expect(alive(pid), `worker ${pid} still running after the hangup`).toBe(false);
      const answeredBy = Date.now() + 10_000;
      while (results.size === 0 && Date.now() < answeredBy) await new Promise((r) => setTimeout(r, 50));
      expect([...results.values()], 'the batch on the device was drained and answered').toEqual(['ok']);
    } finally {
      term.kill('SIGKILL');
      if (workerPid !== undefined && alive(workerPid)) process.kill(workerPid, 'SIGKILL');
      await producer.close();
    }
  }, 60_000);

  it('a worker whose log pipe lost its reader (a log shipper gone: EPIPE) drains on SIGTERM and exits 0, neither hanging on nor crashing of its logs', async () => {
    // The first batch takes 3 s longer: it is on the device when the signal comes.
    const { child, exited, output, producer, input } = await readyWorkerWithFaults('epipe', 'slow@1:3000ms', 30_000);
    const results = new Map<string, string>();
    try {
      const replyTo = uniqueName('epipe-replies');
      await producer.subscribeReplies(replyTo, (r) => results.set(r.id, r.status));
      await producer.publish([makeRequest('mlp-classifier', 'epipe', 0, { replyTo, inputs: [input] })]);
      await new Promise((r) => setTimeout(r, 1000));
      expect(results.size, 'answered before the signal: the batch was not slow').toBe(0);
      // The reader of both pipes goes: every write of the worker's from now on fails with EPIPE.
      child.stdout.destroy();
      child.stderr.destroy();
      await new Promise((r) => setTimeout(r, 200));
      const signalledAt = Date.now();
      child.kill('SIGTERM');
      const result = await Promise.race([exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 20_000))]);
      if (result === 'slow') child.kill('SIGKILL');
      expect(result, `${Date.now() - signalledAt} ms after SIGTERM; output before the reader went:\n${output()}`).toEqual({ code: 0, signal: null });
      const deadline = Date.now() + 10_000;
      while (results.size === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect([...results.values()], 'the batch on the device was drained and answered').toEqual(['ok']);
    } finally {
      await producer.close();
    }
  }, 60_000);

  it('a start-up that hangs (a model file whose read blocks) exits EXIT_START_TIMEOUT (72) past worker.startTimeoutMs, naming the file, instead of starting for good', async () => {
    const { repo, fifo, release } = hungModelRepo();
    const dir = tempDir('npu-fleet-worker-');
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: getServices().redisUrl, prefix: uniqueName('hung-start') } }, modelRepository: repo, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 } }));
    // The bound through its env override, as a Kubernetes manifest would set it.
    const { child, exited, output } = spawnWorker(configFile, { NODE_OPTIONS: '--max-semi-space-size=16', NPU_FLEET__WORKER__START_TIMEOUT_MS: '2000' });
    try {
      const startedAt = Date.now();
      const result = await Promise.race([exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 20_000))]);
      if (result === 'slow') child.kill('SIGKILL');
      expect(result, output()).toEqual({ code: EXIT_START_TIMEOUT, signal: null });
      // The bound, then the addon's wait for the device at exit (NPU_FLEET_EXIT_GRACE_MS, 2 s).
      expect(Date.now() - startedAt).toBeLessThan(15_000);
      expect(output()).toContain('start-up did not finish within worker.startTimeoutMs');
      expect(output()).toContain(`loading ${fifo}`);
      expect(output()).not.toContain('worker ready');
    } finally {
      release();
    }
  }, 60_000);

  it('a device hang exits with EXIT_HANG (75), the code a supervisor or Kubernetes can tell from an OOM kill, not by SIGKILL', async () => {
    // The first execution never ends. The addon's wait for it at exit short (NPU_FLEET_EXIT_GRACE_MS,
    // default 2 s): the exit code must come through that wait, whatever its length.
    const { child, exited, output, producer, input } = await readyWorkerWithFaults('hang-exit', 'hang@1', 1_000, { NPU_FLEET_EXIT_GRACE_MS: '500' });
    try {
      await producer.publish([makeRequest('mlp-classifier', 'hangs', 0, { replyTo: uniqueName('hang-replies'), inputs: [input] })]);
      const result = await Promise.race([exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 20_000))]);
      if (result === 'slow') child.kill('SIGKILL');
      expect(output()).toContain('exiting for restart after device hang');
      expect(result, output()).toEqual({ code: EXIT_HANG, signal: null });
    } finally {
      await producer.close();
    }
  }, 60_000);

  it('a device that fails every batch for worker.hangLimitMs exits with EXIT_HANG for a restart instead of answering everything failed', async () => {
    // Every execution fails, as on a device that was lost.
    const { child, exited, output, producer, input } = await readyWorkerWithFaults('lost-device', 'fail@1+');
    try {
      for (let i = 0; i < 5; i++) {
        await producer.publish([makeRequest('mlp-classifier', `lost-${i}`, 0, { replyTo: uniqueName('lost-replies'), inputs: [input] })]);
        await new Promise((r) => setTimeout(r, 200));
      }
      const result = await Promise.race([exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 20_000))]);
      if (result === 'slow') child.kill('SIGKILL');
      expect(output()).toContain('exiting for restart: the device fails every batch');
      expect(result, output()).toEqual({ code: EXIT_HANG, signal: null });
    } finally {
      await producer.close();
    }
  }, 60_000);

  // The memory broker lives in its own process: a worker process on it serves nothing anybody can
  // send. It is the default, so `npu-fleet worker --device 0` without --config (or with a config
  // that forgot transport) logged 'worker ready' and idled for good, /healthz 200.
  it('a worker on the memory transport (the default, no transport in its config) exits 2 naming transport.kind and the fix, instead of idling as ready', async () => {
    const configFile = join(tempDir('npu-fleet-worker-'), 'fleet.yaml');
    writeFileSync(configFile, stringify({ devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 } }));
    const { child, exited, output } = spawnWorker(configFile);
    const result = await Promise.race([exited, new Promise<'still running'>((r) => setTimeout(() => r('still running'), 15_000))]);
    if (result === 'still running') child.kill('SIGKILL');
    expect(result, output()).toEqual({ code: 2, signal: null });
    expect(output()).toMatch(/transport\.kind is memory.*set transport\.kind to kafka or bullmq/);
    expect(output(), 'refused before the device opened').not.toContain('model version loaded');
  }, 30_000);

  it('a model repository that is not there, set by NPU_FLEET__MODEL_REPOSITORY, exits 2 naming the variable as its source and fix, not the config file', async () => {
    const dir = tempDir('npu-fleet-worker-');
    const configFile = join(dir, 'fleet.yaml');
    writeFileSync(configFile, stringify({ transport: { kind: 'bullmq', bullmq: { redisUrl: 'redis://127.0.0.1:1' } }, devices: { count: 1, backend: 'sim' }, worker: { metricsPort: 0 } }));
    const { child, exited, output } = spawnWorker(configFile, { NPU_FLEET__MODEL_REPOSITORY: join(dir, 'nonexistent') });
    const result = await Promise.race([exited, new Promise<'still running'>((r) => setTimeout(() => r('still running'), 15_000))]);
    if (result === 'still running') child.kill('SIGKILL');
    expect(result, output()).toEqual({ code: 2, signal: null });
    expect(output()).toContain(`model repository ${join(dir, 'nonexistent')} is not a directory (ENOENT); modelRepository was set by the environment variable NPU_FLEET__MODEL_REPOSITORY: fix NPU_FLEET__MODEL_REPOSITORY or unset it`);
    expect(output()).not.toContain('in the fleet config');
  }, 30_000);

  it('a worker the Kafka brokers refuse (session timeout below their minimum) exits non-zero at start-up, naming the setting, instead of idling as ready', async () => {
    const dir = tempDir('npu-fleet-worker-');
    const configFile = join(dir, 'fleet.yaml');
    const kafka = { brokers: getServices().kafkaBrokers, groupId: uniqueName('refused'), sessionTimeoutMs: 3_000, topicTemplate: `${uniqueName('refused')}.{model}.p{priority}` };
    writeFileSync(configFile, stringify({ transport: { kind: 'kafka', kafka }, devices: { count: 1, backend: 'sim' }, models: ['mlp-classifier'], worker: { metricsPort: 0 } }));
    const { child, exited, output } = spawnWorker(configFile, { NODE_OPTIONS: '--max-semi-space-size=16' });
    const result = await Promise.race([exited, new Promise<'slow'>((r) => setTimeout(() => r('slow'), 40_000))]);
    if (result === 'slow') child.kill('SIGKILL');
    expect(result, output()).not.toBe('slow');
    expect(result, output()).not.toEqual({ code: 0, signal: null });
    expect(output()).toContain('the brokers refused transport.kafka.sessionTimeoutMs (3000 ms)');
    expect(output()).not.toContain('worker ready');
    expect(output(), 'the flag came in NODE_OPTIONS').not.toContain('worker runs without');
  }, 60_000);
});
