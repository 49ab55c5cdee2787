import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/observability/logger.ts';
import { openPredecessorNote, predecessorNotePath } from '../../../src/runtime/predecessor-note.ts';

const log = createLogger({ level: 'silent' });
const file = (content?: string): string => {
  const path = join(mkdtempSync(join(tmpdir(), 'npu-fleet-note-')), 'owner.json');
  if (content !== undefined) writeFileSync(path, content);
  return path;
};
/** The pid of a process that has exited. */
const deadPid = (): number => Number(spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout);

describe('predecessor note', () => {
  it('sits beside the in-flight journal', () => {
    expect(predecessorNotePath('/var/npu/npu-fleet-ab-device-3.inflight.json')).toBe('/var/npu/npu-fleet-ab-device-3.owner.json');
  });

  it('hands over the note of a dead process of this host (or one with our own pid: a restarted container), and nothing else', () => {
    const note = (pid: number, host = hostname()) => JSON.stringify({ pid, host, note: 'theirs' });
    expect(openPredecessorNote(file(note(deadPid())), log).previous).toBe('theirs');
    expect(openPredecessorNote(file(note(process.pid)), log).previous).toBe('theirs');
    // Alive: two workers for one device by mistake, or a reused pid; what it holds stays its own.
    expect(openPredecessorNote(file(note(process.ppid)), log).previous).toBeUndefined();
    expect(openPredecessorNote(file(note(deadPid(), 'another-host')), log).previous).toBeUndefined();
    expect(openPredecessorNote(file('{"pid": 12'), log).previous).toBeUndefined();
    expect(openPredecessorNote(file(), log).previous).toBeUndefined();
  });

  it("saves this process's note for the next one", () => {
    const path = file();
    openPredecessorNote(path, log).save('mine');
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual({ pid: process.pid, host: hostname(), note: 'mine' });
  });
});
