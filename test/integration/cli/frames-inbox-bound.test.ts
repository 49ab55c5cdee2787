// `npu-fleet frames` / `load` open their reply inbox before the run, bounded by --timeout-ms. On a
// Kafka whose brokers answer, opening takes 0.5-5 s (create the inbox topic, join its group), so a
// tight --timeout-ms (a frame's wait for its result, e.g. 8 ms at a few frame intervals) ran out
// there, and the message asked only whether the brokers were up: brokers that were fine (QA). It
// now says --timeout-ms bounds the opening too, and to raise it when the brokers are up, as
// `publish --await` does (04f4159).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { main } from '../../../src/cli/main.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { uniqueKafkaTransport } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const { stdout, stderr } = captureCliOutput();

describe('npu-fleet frames and load with a --timeout-ms shorter than opening the reply inbox', () => {
  for (const command of ['frames', 'load'] as const) {
    it(`${command}, Kafka up: exit 1, nothing sent, and the message says to raise --timeout-ms, not only to check the brokers`, { timeout: 60_000 }, async () => {
      const file = join(tempDir('npu-fleet-frames-inbox-bound-'), 'fleet.yaml');
      writeFileSync(file, stringify({ transport: uniqueKafkaTransport('framesbound'), modelRepository: 'examples/models', log: { level: 'error' } }));
      expect(await main([command, '--config', file, '--model', 'mlp-classifier', '--seconds', '1', '--timeout-ms', '8'])).toBe(1);
      const err = stderr.join('');
      expect(err).toMatch(new RegExp(`npu-fleet: ${command}: the kafka producer could not open its reply inbox, so no request was sent: it did not finish within 8 ms \\(--timeout-ms\\)`));
      expect(err).toMatch(/--timeout-ms also bounds opening the reply inbox \(connecting, creating its topic, joining its consumer group\): raise it if the brokers are up, else check transport\.kafka\.brokers/);
      expect(stdout.join('')).not.toMatch(/^done:/m);
    });
  }
});
