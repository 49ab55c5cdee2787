import { execFileSync } from 'node:child_process';
import { closeSync, constants, copyFileSync, mkdirSync, openSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from './temp-dir.ts';

/**
 * A model repository whose mlp-classifier/1/model.onnx is a FIFO: opening it to load blocks until
 * a writer comes, as a read on a stalled mount (or a device open on a hung driver) never returns.
 * Dated an hour back so the start's settle wait does not take it for a copy in progress.
 * release() opens it for writing once and closes it: the blocked load then fails (not a regular file).
 */
export function hungModelRepo(): { repo: string; fifo: string; release: () => void } {
  const repo = join(tempDir('npu-fleet-hung-repo-'), 'models');
  const versionDir = join(repo, 'mlp-classifier', '1');
  mkdirSync(versionDir, { recursive: true });
  copyFileSync(join('examples/models/mlp-classifier/config.yaml'), join(repo, 'mlp-classifier', 'config.yaml'));
  const fifo = join(versionDir, 'model.onnx');
  execFileSync('mkfifo', [fifo]);
  const hourAgo = new Date(Date.now() - 3_600_000);
  for (const p of [fifo, versionDir, join(repo, 'mlp-classifier', 'config.yaml')]) utimesSync(p, hourAgo, hourAgo);
  const release = (): void => {
    try {
      // Non-blocking: with no reader waiting (the load never started, or its process is gone) it fails with ENXIO.
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // nobody is reading it
    }
  };
  return { repo, fifo, release };
}
