import { readdirSync, readFileSync, readlinkSync, statSync, type Stats } from 'node:fs';
import { readdir, readFile, readlink, stat } from 'node:fs/promises';
import { FleetError } from '../errors/fleet-error.ts';

/**
 * The file-system calls a model repository scan makes. The scan is written once as a generator
 * that yields each call (FsSteps) and runs two ways: synchronously for one-shot callers (the CLI),
 * and through fs.promises for a worker's poll, where a read on a hung NFS mount must occupy a
 * libuv thread, not the event loop that carries broker heartbeats, lock renewals and /healthz.
 */
export interface RepositoryFs {
  stat(path: string): Promise<Stats>;
  readdir(path: string): Promise<string[]>;
  readFile(path: string): Promise<string>;
  readlink(path: string): Promise<string>;
}

export const nodeRepositoryFs: RepositoryFs = {
  stat: (path) => stat(path),
  readdir: (path) => readdir(path),
  readFile: (path) => readFile(path, 'utf8'),
  readlink: (path) => readlink(path),
};

type FsOp = keyof RepositoryFs;
export interface FsCall {
  readonly op: FsOp;
  readonly path: string;
}
export type FsSteps<T> = Generator<FsCall, T, unknown>;

export function* statOf(path: string): FsSteps<Stats> {
  return (yield { op: 'stat', path }) as Stats;
}

export function* entriesOf(path: string): FsSteps<string[]> {
  return (yield { op: 'readdir', path }) as string[];
}

export function* textOf(path: string): FsSteps<string> {
  return (yield { op: 'readFile', path }) as string;
}

export function* linkOf(path: string): FsSteps<string> {
  return (yield { op: 'readlink', path }) as string;
}

/**
 * Codes that say the entry is not there (or never readable by this worker): a problem of that
 * entry. Any other failure (EIO, ESTALE, ETIMEDOUT: an NFS soft mount timing out, a stale handle)
 * says nothing about the entry: taken as absence, one such blip would unload the model it holds.
 */
const ABSENT = new Set(['ENOENT', 'ENOTDIR', 'ELOOP', 'ENAMETOOLONG', 'EACCES', 'EPERM']);

/** Rethrows a failure other than absence as the file system's (the scan then fails; a poll serves on). */
export function unlessAbsent(path: string, err: unknown): void {
  const code = (err as NodeJS.ErrnoException).code;
  if (code !== undefined && ABSENT.has(code)) return;
  throw new FleetError('SERVICE_UNAVAILABLE', `cannot read ${path} (${code ?? (err as Error).message}): the file system failed, not the entry; serving on with the loaded versions`, {
    cause: err,
    details: { path, code },
  });
}

/** Whether `path` exists, following links (as existsSync); a read failure other than absence throws. */
export function* existsAt(path: string): FsSteps<boolean> {
  try {
    yield* statOf(path);
    return true;
  } catch (err) {
    unlessAbsent(path, err);
    return false;
  }
}

function callSync(call: FsCall): unknown {
  switch (call.op) {
    case 'stat':
      return statSync(call.path);
    case 'readdir':
      return readdirSync(call.path);
    case 'readFile':
      return readFileSync(call.path, 'utf8');
    case 'readlink':
      return readlinkSync(call.path);
  }
}

/** Runs `steps` with blocking calls: for one-shot commands, never on a serving worker's loop. */
export function runSync<T>(steps: FsSteps<T>): T {
  let step = steps.next();
  while (step.done !== true) {
    let value: unknown;
    try {
      value = callSync(step.value);
    } catch (err) {
      step = steps.throw(err);
      continue;
    }
    step = steps.next(value);
  }
  return step.value;
}

/** Runs `steps` one call at a time through `fs`, so a scan holds at most one libuv thread. */
export async function runAsync<T>(steps: FsSteps<T>, fs: RepositoryFs = nodeRepositoryFs): Promise<T> {
  let step = steps.next();
  while (step.done !== true) {
    let value: unknown;
    try {
      value = await fs[step.value.op](step.value.path);
    } catch (err) {
      step = steps.throw(err);
      continue;
    }
    step = steps.next(value);
  }
  return step.value;
}
