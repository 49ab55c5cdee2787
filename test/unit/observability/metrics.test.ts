import { describe, expect, it } from 'vitest';
import { FLEET_METRICS } from '../../../src/observability/metric-definitions.ts';
import { FleetMetrics } from '../../../src/observability/metrics.ts';

/** Parses exposition text into `name{labels} value` → value, labels kept verbatim. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

describe('FleetMetrics', () => {
  it('renders every fleet metric with HELP/TYPE, none with request-id-like labels', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    const text = await m.render();
    for (const def of Object.values(FLEET_METRICS)) {
      expect(text).toContain(`# HELP ${def.name} `);
      expect(text).toContain(`# TYPE ${def.name} ${def.kind}`);
      expect(def.name).toMatch(/^npu_fleet_[a-z_]+$/);
      for (const label of def.labels) {
        expect(['model', 'version', 'priority', 'status', 'code', 'device', 'gear', 'stage', 'transport', 'reason', 'outcome']).toContain(label);
      }
    }
    expect(text).not.toContain('npu_fleet_process_');
    expect(m.contentType).toMatch(/^text\/plain/);
  });

  it('counts results by status and observes end-to-end latency per priority', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    m.observeResult('mlp', 'ok', 0.004, 0);
    m.observeResult('mlp', 'ok', 0.2, 0);
    m.observeResult('mlp', 'late', 1.5, 2);
    m.observeResult('mlp', 'invalid');
    const s = samples(await m.render());
    expect(s.get('npu_fleet_requests_total{model="mlp",status="ok"}')).toBe(2);
    expect(s.get('npu_fleet_requests_total{model="mlp",status="late"}')).toBe(1);
    expect(s.get('npu_fleet_requests_total{model="mlp",status="invalid"}')).toBe(1);
    expect(s.get('npu_fleet_end_to_end_latency_seconds_bucket{le="0.005",model="mlp",priority="0"}')).toBe(1);
    expect(s.get('npu_fleet_end_to_end_latency_seconds_bucket{le="0.25",model="mlp",priority="0"}')).toBe(2);
    expect(s.get('npu_fleet_end_to_end_latency_seconds_count{model="mlp",priority="2"}')).toBe(1);
    // invalid had no latency: only the three timed results are in the histogram
    const counts = [...s].filter(([k]) => k.startsWith('npu_fleet_end_to_end_latency_seconds_count'));
    expect(counts.reduce((a, [, v]) => a + v, 0)).toBe(3);
  });

  it('counts unserved results by status and code in the same call, served ones (ok, late) not at all', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    m.observeResult('mlp', 'ok', 0.01, 0);
    m.observeResult('mlp', 'late', 2, 0, 'DEADLINE_EXCEEDED');
    m.observeResult('mlp', 'rejected', undefined, 1, 'QUEUE_FULL');
    m.observeResult('mlp', 'rejected', undefined, 1, 'QUEUE_FULL');
    m.observeResult('mlp', 'rejected', undefined, 1, 'SUPERSEDED');
    m.observeResult('mlp', 'expired', 0.5, 1, 'DEADLINE_EXCEEDED');
    m.observeResult('mlp', 'failed', undefined, undefined, 'DEVICE_HANG');
    m.observeResult('mlp', 'invalid');
    const s = samples(await m.render());
    expect(s.get('npu_fleet_unserved_total{model="mlp",status="rejected",code="QUEUE_FULL"}')).toBe(2);
    expect(s.get('npu_fleet_unserved_total{model="mlp",status="rejected",code="SUPERSEDED"}')).toBe(1);
    expect(s.get('npu_fleet_unserved_total{model="mlp",status="expired",code="DEADLINE_EXCEEDED"}')).toBe(1);
    expect(s.get('npu_fleet_unserved_total{model="mlp",status="failed",code="DEVICE_HANG"}')).toBe(1);
    // A non-ok result without an error code is still counted, under OTHER.
    expect(s.get('npu_fleet_unserved_total{model="mlp",status="invalid",code="OTHER"}')).toBe(1);
    const unserved = [...s].filter(([k]) => k.startsWith('npu_fleet_unserved_total{'));
    expect(unserved.some(([k]) => /status="(?:ok|late)"/.test(k))).toBe(false);
    expect(unserved.reduce((a, [, v]) => a + v, 0)).toBe(6);
  });

  it('keeps the code label bounded: a code outside the FleetError list is OTHER, one series for all of them', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    const odd = ['NOT_A_CODE', 'queue_full', 'toString', '__proto__', 'constructor', '', ...Array.from({ length: 50 }, (_, i) => `E${i}`)];
    for (const code of odd) m.observeResult('mlp', 'failed', undefined, undefined, code);
    m.observeResult('mlp', 'failed', undefined, undefined, 'DEVICE_ERROR');
    const text = await m.render();
    const codes = new Set([...text.matchAll(/npu_fleet_unserved_total\{[^}]*code="([^"]*)"/g)].map((x) => x[1]));
    expect([...codes].sort()).toEqual(['DEVICE_ERROR', 'OTHER']);
    expect(samples(text).get('npu_fleet_unserved_total{model="mlp",status="failed",code="OTHER"}')).toBe(odd.length);
  });

  it('keeps the priority label bounded: a priority no model can have (a BullMQ job priority set by hand) is "other"', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    const odd = [99_998, 16, -1, 1.5, Number.NaN];
    for (const p of odd) {
      m.observeResult('mlp', 'ok', 0.01, p);
      m.observeQueueWait('mlp', p, 0.01);
    }
    m.setLocalQueues(new Map([['mlp', { depthByPriority: new Map(odd.map((p) => [p, 1])), bytes: 0 }]]));
    m.observeResult('mlp', 'ok', 0.01, 15);
    const text = await m.render();
    const priorities = new Set([...text.matchAll(/priority="([^"]*)"/g)].map((x) => x[1]));
    expect([...priorities].sort()).toEqual(['15', 'other']);
    // The odd levels of one reading share one series: their depths add up.
    expect(samples(text).get('npu_fleet_local_queue_depth{model="mlp",priority="other"}')).toBe(odd.length);
  });

  it('records batches: size, padding (explicit and derived from the gear), execute time per gear', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    m.observeBatch({ model: 'cnn', device: 1, gear: 8, items: 6, executeSeconds: 0.003 });
    m.observeBatch({ model: 'cnn', device: 1, gear: 8, items: 8, executeSeconds: 0.004 });
    m.observeBatch({ model: 'cnn', device: 0, gear: 4, items: 3, padded: 1, executeSeconds: 0.002 });
    const s = samples(await m.render());
    expect(s.get('npu_fleet_padded_items_total{model="cnn"}')).toBe(3);
    expect(s.get('npu_fleet_batch_size_sum{model="cnn"}')).toBe(17);
    expect(s.get('npu_fleet_batch_size_count{model="cnn"}')).toBe(3);
    expect(s.get('npu_fleet_batch_padding_ratio_bucket{le="0",model="cnn"}')).toBe(1);
    expect(s.get('npu_fleet_batch_padding_ratio_bucket{le="0.1",model="cnn"}')).toBe(1);
    expect(s.get('npu_fleet_batch_padding_ratio_bucket{le="0.25",model="cnn"}')).toBe(3);
    expect(s.get('npu_fleet_batch_padding_ratio_sum{model="cnn"}')).toBeCloseTo(0.25 + 0.25, 10);
    expect(s.get('npu_fleet_device_execute_seconds_count{model="cnn",device="1",gear="8"}')).toBe(2);
    expect(s.get('npu_fleet_device_execute_seconds_sum{model="cnn",device="0",gear="4"}')).toBeCloseTo(0.002, 10);
    expect(s.get('npu_fleet_batches_total{model="cnn",device="1",gear="8",outcome="ok"}')).toBe(2);
  });

  it('counts a failed batch under outcome="failed", in the size and padding metrics, and its execute time only when known', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    m.observeBatch({ model: 'cnn', device: 0, gear: 8, items: 6, executeSeconds: 0.003 });
    m.observeBatch({ model: 'cnn', device: 0, gear: 8, items: 4, outcome: 'failed', executeSeconds: undefined });
    m.observeBatch({ model: 'cnn', device: 0, gear: 8, items: 8, outcome: 'failed', executeSeconds: 0.002 });
    const s = samples(await m.render());
    expect(s.get('npu_fleet_batches_total{model="cnn",device="0",gear="8",outcome="ok"}')).toBe(1);
    expect(s.get('npu_fleet_batches_total{model="cnn",device="0",gear="8",outcome="failed"}')).toBe(2);
    expect(s.get('npu_fleet_batch_size_count{model="cnn"}')).toBe(3);
    expect(s.get('npu_fleet_padded_items_total{model="cnn"}')).toBe(6);
    expect(s.get('npu_fleet_device_execute_seconds_count{model="cnn",device="0",gear="8"}')).toBe(2);
    expect(s.get('npu_fleet_device_execute_seconds_sum{model="cnn",device="0",gear="8"}')).toBeCloseTo(0.005, 10);
  });

  it('resolves sub-millisecond device executes per gear: the simulator ran mlp-classifier at 3.5 µs (gear 1) and 22 µs (gear 32), small-cnn gear 1 at 0.21 ms', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    const measured = [
      { model: 'mlp', gear: 1, seconds: 0.0000035 },
      { model: 'mlp', gear: 32, seconds: 0.000022 },
      { model: 'cnn', gear: 1, seconds: 0.00021 },
      { model: 'cnn', gear: 32, seconds: 0.0016 },
    ];
    for (const { model, gear, seconds } of measured) for (let i = 0; i < 10; i++) m.observeBatch({ model, device: 0, gear, items: gear, executeSeconds: seconds });
    const s = samples(await m.render());
    for (const { model, gear, seconds } of measured) {
      // histogram_quantile(0.5, ...) as Prometheus computes it: linear within the bucket the rank falls in.
      const buckets = [...s]
        .filter(([k]) => k.startsWith('npu_fleet_device_execute_seconds_bucket{') && k.includes(`model="${model}"`) && k.includes(`gear="${gear}"`))
        .map(([k, v]) => [Number(/le="([^"]+)"/.exec(k)?.[1]), v] as const)
        .sort((a, b) => a[0] - b[0]);
      const rank = 0.5 * (buckets.at(-1)?.[1] ?? 0);
      const i = buckets.findIndex(([, count]) => count >= rank);
      const [upper, count] = buckets[i] as readonly [number, number];
      const [lower, below] = i > 0 ? (buckets[i - 1] as readonly [number, number]) : [0, 0];
      const p50 = lower + ((upper - lower) * (rank - below)) / (count - below);
      // Within a factor of 2.5 of the truth, so the gears' execute times can be told apart.
      expect(p50 / seconds, `${model} gear ${gear}: p50 ${p50} s for ${seconds} s`).toBeLessThan(2.5);
      expect(p50 / seconds, `${model} gear ${gear}: p50 ${p50} s for ${seconds} s`).toBeGreaterThan(1 / 2.5);
    }
  });

  it('counts padding in slots: a bucketed batch pads its gear rows over the whole bound and its short samples up to it', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    // Gear 4, bound 16: 3 real samples, of lengths 10, 10 and 16 (2 × 6 positions padded), and one padding row.
    m.observeBatch({ model: 'text', device: 0, gear: 4, items: 3, boundLength: 16, paddedLengthSlots: 12, executeSeconds: 0.001 });
    // Not bucketed: a slot is a sample.
    m.observeBatch({ model: 'cnn', device: 0, gear: 8, items: 6, boundLength: null, executeSeconds: 0.001 });
    const s = samples(await m.render());
    expect(s.get('npu_fleet_batch_slots_total{model="text"}')).toBe(64);
    expect(s.get('npu_fleet_padded_slots_total{model="text"}')).toBe(16 + 12);
    expect(s.get('npu_fleet_batch_padding_ratio_sum{model="text"}')).toBeCloseTo(28 / 64, 12);
    expect(s.get('npu_fleet_padded_items_total{model="text"}')).toBe(1);
    expect(s.get('npu_fleet_batch_slots_total{model="cnn"}')).toBe(8);
    expect(s.get('npu_fleet_padded_slots_total{model="cnn"}')).toBe(2);
    expect(s.get('npu_fleet_batch_padding_ratio_sum{model="cnn"}')).toBeCloseTo(0.25, 12);
  });

  it('batch size buckets reach the largest maxBatchSize a model config allows', async () => {
    const MAX_BATCH_SIZE = 1024; // ModelConfigSchema's maxBatchSize limit
    const m = new FleetMetrics({ processMetrics: false });
    m.observeBatch({ model: 'big', device: 0, gear: 512, items: 300, executeSeconds: 0.01 });
    m.observeBatch({ model: 'big', device: 0, gear: MAX_BATCH_SIZE, items: MAX_BATCH_SIZE, executeSeconds: 0.02 });
    const s = samples(await m.render());
    expect(s.get('npu_fleet_batch_size_bucket{le="512",model="big"}')).toBe(1);
    expect(s.get(`npu_fleet_batch_size_bucket{le="${MAX_BATCH_SIZE}",model="big"}`)).toBe(2);
  });

  it('sets gauges and counters through the typed helpers', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    m.setBatchesInFlight(0, 2);
    m.setDeviceMemoryUsed(0, 3_145_728);
    m.setDeviceMemoryUsed(1, Number.NaN);
    m.setLocalQueues(new Map([['mlp', { depthByPriority: new Map([[1, 17]]), bytes: 4096 }]]));
    m.setLocalQueues(new Map([['mlp', { depthByPriority: new Map([[1, 5]]), bytes: 1024 }]]));
    m.setSourceLag('kafka', { mlp: 1234 });
    m.observeQueueWait('mlp', 1, 0.02);
    m.deadlineMiss('mlp', 'queue', 3);
    m.deadlineMiss('mlp', 'device');
    m.deadlineMiss('mlp', 'publish', 0);
    m.deadlineMiss('mlp', 'admission', 2);
    m.addWastedDeviceSeconds('mlp', 'late', 0.5);
    m.addWastedDeviceSeconds('mlp', 'late', 0.25);
    m.addWastedDeviceSeconds('mlp', 'expired', -1);
    m.workerRestarted(1);
    m.workerRestarted(1);
    m.duplicateSeen('mlp', 4);
    m.deadLettered('mlp', 'INVALID_MESSAGE');
    m.setWorkerReady(true);
    const s = samples(await m.render());
    expect(s.get('npu_fleet_batches_in_flight{device="0"}')).toBe(2);
    expect(s.get('npu_fleet_device_memory_used_bytes{device="0"}')).toBe(3_145_728);
    expect(s.has('npu_fleet_device_memory_used_bytes{device="1"}')).toBe(false);
    expect(s.get('npu_fleet_local_queue_depth{model="mlp",priority="1"}')).toBe(5);
    expect(s.get('npu_fleet_local_queue_bytes{model="mlp"}')).toBe(1024);
    expect(s.get('npu_fleet_source_lag{model="mlp",transport="kafka"}')).toBe(1234);
    expect(s.get('npu_fleet_queue_wait_seconds_count{model="mlp",priority="1"}')).toBe(1);
    expect(s.get('npu_fleet_deadline_misses_total{model="mlp",stage="queue"}')).toBe(3);
    expect(s.get('npu_fleet_deadline_misses_total{model="mlp",stage="device"}')).toBe(1);
    expect(s.has('npu_fleet_deadline_misses_total{model="mlp",stage="publish"}')).toBe(false);
    expect(s.get('npu_fleet_deadline_misses_total{model="mlp",stage="admission"}')).toBe(2);
    expect(s.get('npu_fleet_wasted_device_seconds_total{model="mlp",reason="late"}')).toBe(0.75);
    expect(s.has('npu_fleet_wasted_device_seconds_total{model="mlp",reason="expired"}')).toBe(false);
    expect(s.get('npu_fleet_worker_restarts_total{device="1"}')).toBe(2);
    expect(s.get('npu_fleet_duplicates_total{model="mlp"}')).toBe(4);
    expect(s.get('npu_fleet_dlq_total{model="mlp",reason="INVALID_MESSAGE"}')).toBe(1);
    expect(s.get('npu_fleet_worker_ready')).toBe(1);
    m.setWorkerReady(false);
    expect(samples(await m.render()).get('npu_fleet_worker_ready')).toBe(0);
  });

  it('per-model gauges list what the latest reading lists: a model gone from it (unloaded) and a priority level gone from its queue leave /metrics', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    const queue = (levels: Array<[number, number]>, bytes: number) => ({ depthByPriority: new Map(levels), bytes });
    m.setLocalQueues(new Map([['mlp', queue([[0, 3], [1, 4], [2, 0]], 700)], ['cnn', queue([[0, 2]], 50)]]));
    m.setSourceLag('kafka', { mlp: 12, cnn: 9 });
    const before = samples(await m.render());
    expect(before.get('npu_fleet_local_queue_depth{model="cnn",priority="0"}')).toBe(2);
    expect(before.get('npu_fleet_local_queue_depth{model="mlp",priority="2"}')).toBe(0);
    expect(before.get('npu_fleet_source_lag{model="cnn",transport="kafka"}')).toBe(9);
    // cnn is unloaded; mlp's config now has two priority levels.
    m.setLocalQueues(new Map([['mlp', queue([[0, 1], [1, 0]], 100)]]));
    m.setSourceLag('kafka', { mlp: 2 });
    const text = await m.render();
    expect(text).not.toContain('model="cnn"');
    expect(text).not.toContain('priority="2"');
    const after = samples(text);
    expect(after.get('npu_fleet_local_queue_depth{model="mlp",priority="0"}')).toBe(1);
    expect(after.get('npu_fleet_local_queue_depth{model="mlp",priority="1"}')).toBe(0);
    expect(after.get('npu_fleet_local_queue_bytes{model="mlp"}')).toBe(100);
    expect(after.get('npu_fleet_source_lag{model="mlp",transport="kafka"}')).toBe(2);
    // After a reset the gauges are empty, and the next reading fills them again.
    m.resetAll();
    m.setLocalQueues(new Map([['cnn', queue([[0, 5]], 10)]]));
    const reset = samples(await m.render());
    expect(reset.has('npu_fleet_local_queue_depth{model="mlp",priority="0"}')).toBe(false);
    expect(reset.get('npu_fleet_local_queue_depth{model="cnn",priority="0"}')).toBe(5);
  });

  it('oldest queued age per priority: absent for an empty level, and the oldest (not a sum) of levels sharing the label "other"', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    const queue = (depth: Array<[number, number]>, ages: Array<[number, number]>) => ({ depthByPriority: new Map(depth), bytes: 0, oldestAgeSecondsByPriority: new Map(ages) });
    m.setLocalQueues(new Map([['mlp', queue([[0, 2], [1, 0], [20, 1], [21, 1]], [[0, 1.5], [20, 3], [21, 7]])]]));
    const first = samples(await m.render());
    expect(first.get('npu_fleet_oldest_queued_age_seconds{model="mlp",priority="0"}')).toBe(1.5);
    expect(first.has('npu_fleet_oldest_queued_age_seconds{model="mlp",priority="1"}')).toBe(false);
    expect(first.get('npu_fleet_oldest_queued_age_seconds{model="mlp",priority="other"}')).toBe(7);
    // Level 0 emptied, level 1 filled: the series follow the reading.
    m.setLocalQueues(new Map([['mlp', queue([[0, 0], [1, 1]], [[1, 0.25]])]]));
    const text = await m.render();
    expect(text).not.toMatch(/^npu_fleet_oldest_queued_age_seconds\{model="mlp",priority="(0|other)"\}/m);
    expect(samples(text).get('npu_fleet_oldest_queued_age_seconds{model="mlp",priority="1"}')).toBe(0.25);
  });

  it('backlog in device seconds: source = lag x cost per request, total = source + local; no lag, no source part or total; a model gone from the reading leaves all four', async () => {
    const m = new FleetMetrics({ processMetrics: false });
    // 4 ms for a full batch of 32 → 0.125 ms a request; 100 queued here, 900 in the broker.
    m.setBacklog(
      new Map([
        ['mlp', { deviceSecondsPerRequest: 0.004 / 32, localSeconds: (100 * 0.004) / 32, sourceLag: 900 }],
        ['cnn', { deviceSecondsPerRequest: 0.5, localSeconds: 2 }],
        ['bad', { deviceSecondsPerRequest: Number.NaN, localSeconds: 1, sourceLag: 1 }],
      ]),
    );
    const s = samples(await m.render());
    expect(s.get('npu_fleet_device_seconds_per_request{model="mlp"}')).toBe(0.000125);
    expect(s.get('npu_fleet_local_backlog_seconds{model="mlp"}')).toBe(0.0125);
    expect(s.get('npu_fleet_source_backlog_seconds{model="mlp"}')).toBeCloseTo(0.1125, 12);
    expect(s.get('npu_fleet_backlog_seconds{model="mlp"}')).toBeCloseTo(0.125, 12);
    expect(s.get('npu_fleet_device_seconds_per_request{model="cnn"}')).toBe(0.5);
    expect(s.get('npu_fleet_local_backlog_seconds{model="cnn"}')).toBe(2);
    expect(s.has('npu_fleet_source_backlog_seconds{model="cnn"}')).toBe(false);
    expect(s.has('npu_fleet_backlog_seconds{model="cnn"}')).toBe(false);
    expect([...s.keys()].filter((k) => k.includes('model="bad"'))).toEqual([]);

    m.setBacklog(new Map([['cnn', { deviceSecondsPerRequest: 0.5, localSeconds: 2, sourceLag: 4 }]]));
    const text = await m.render();
    expect(text).not.toContain('model="mlp"');
    expect(samples(text).get('npu_fleet_source_backlog_seconds{model="cnn"}')).toBe(2);
    expect(samples(text).get('npu_fleet_backlog_seconds{model="cnn"}')).toBe(4);
    m.resetAll();
    m.setBacklog(new Map());
    expect(await m.render()).not.toContain('model="cnn"');
  });

  it('keeps instances independent (own registry) and runs scrape hooks, surviving a throwing one', async () => {
    const a = new FleetMetrics({ processMetrics: false });
    const b = new FleetMetrics({ processMetrics: false, defaultLabels: { worker: 'device-1' } });
    a.observeResult('mlp', 'ok', 0.01, 0);
    let depth = 0;
    const off = b.onScrape(() => {
      depth += 1;
      b.setLocalQueues(new Map([['mlp', { depthByPriority: new Map([[0, depth]]), bytes: 0 }]]));
    });
    b.onScrape(() => {
      throw new Error('boom');
    });
    const sa = samples(await a.render());
    const sb1 = samples(await b.render());
    const sb2 = samples(await b.render());
    expect(sa.get('npu_fleet_requests_total{model="mlp",status="ok"}')).toBe(1);
    expect(sb1.has('npu_fleet_requests_total{model="mlp",status="ok",worker="device-1"}')).toBe(false);
    expect(sb1.get('npu_fleet_local_queue_depth{model="mlp",priority="0",worker="device-1"}')).toBe(1);
    expect(sb2.get('npu_fleet_local_queue_depth{model="mlp",priority="0",worker="device-1"}')).toBe(2);
    off();
    const sb3 = samples(await b.render());
    expect(sb3.get('npu_fleet_local_queue_depth{model="mlp",priority="0",worker="device-1"}')).toBe(2);
  });

  it('a scrape hook that does not answer (a broker read during an outage) delays the scrape only up to the hook timeout, and is not piled up', async () => {
    const m = new FleetMetrics({ processMetrics: false, scrapeHookTimeoutMs: 100 });
    m.observeResult('mlp', 'ok', 0.01, 0);
    let calls = 0;
    m.onScrape(() => {
      calls += 1;
      return new Promise<void>(() => undefined);
    });
    let slowDone: () => void = () => undefined;
    m.onScrape(
      () =>
        new Promise<void>((resolve) => {
          slowDone = () => {
            m.setSourceLag('bullmq', { mlp: 7 });
            resolve();
          };
        }),
    );
    const bounded = (): Promise<string> => Promise.race([m.render(), new Promise<string>((r) => setTimeout(() => r('scrape still waiting'), 2000))]);
    const started = Date.now();
    const first = await bounded();
    expect(first).toContain('npu_fleet_requests_total{model="mlp",status="ok"} 1');
    expect(Date.now() - started).toBeLessThan(1000);
    expect(first).not.toContain('npu_fleet_source_lag{');
    slowDone();
    const second = await bounded();
    // The late hook's gauge shows from the next scrape on; the hung one is not started again.
    expect(samples(second).get('npu_fleet_source_lag{model="mlp",transport="bullmq"}')).toBe(7);
    await bounded();
    expect(calls).toBe(1);
  });

  it('exports prefixed process metrics (event-loop lag) when enabled, twice in one process without clashing', async () => {
    const a = new FleetMetrics();
    const b = new FleetMetrics();
    const [ta, tb] = [await a.render(), await b.render()];
    for (const t of [ta, tb]) {
      expect(t).toContain('npu_fleet_nodejs_eventloop_lag_seconds');
      expect(t).toContain('npu_fleet_process_cpu_seconds_total');
    }
  });
});
