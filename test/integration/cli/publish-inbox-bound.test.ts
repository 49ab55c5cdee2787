// `publish --await` opens its reply inbox before it reads a line, bounded by --timeout-ms. On a
// Kafka whose brokers answer, opening takes 0.5-5 s (create the inbox topic, join its group), so a
// short --timeout-ms (a tight per-request bound) ran out there, and the message sent the user to
// check transport.kafka.brokers only: brokers that were fine. It now says --timeout-ms bounds the
// opening too, and to raise it when the brokers are up.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { main } from '../../../src/cli/main.ts';
import { captureCliOutput } from '../../helpers/capture-cli-output.ts';
import { uniqueKafkaTransport } from '../../helpers/services.ts';
import { tempDir } from '../../helpers/temp-dir.ts';

const { stderr } = captureCliOutput();

describe('npu-fleet publish --await with a --timeout-ms shorter than opening the reply inbox', () => {
  it('Kafka up: exit 1, nothing sent, and the message says to raise --timeout-ms, not only to check the brokers', { timeout: 60_000 }, async () => {
    const file = join(tempDir('npu-fleet-inbox-bound-'), 'fleet.yaml');
    writeFileSync(file, stringify({ transport: uniqueKafkaTransport('inboxbound'), modelRepository: 'examples/models', log: { level: 'error' } }));
    expect(await main(['publish', '--config', file, '--model', 'mlp-classifier', '--count', '1', '--await', '--timeout-ms', '1'])).toBe(1);
    const err = stderr.join('');
    expect(err).toMatch(/could not open its reply inbox \(nothing was sent\): it did not finish within 1 ms \(--timeout-ms\)/);
    expect(err).toMatch(/--timeout-ms also bounds opening the reply inbox .*raise it if the brokers are up.*transport\.kafka\.brokers/);
  });
});
