/**
 * A seeded mutation fuzzer for the wire codecs: JSON-tree mutations of the seed corpus
 * (codec-fuzz-seeds.ts) that keep the bytes parseable enough to reach validation, and byte
 * mutations that break the framing. Everything follows one 32-bit seed, so a failing input is
 * rebuilt from the seed and iteration number printed with it.
 */
import { SEED_INPUTS, joinFrame, splitFrame, type SeedInput } from './codec-fuzz-seeds.ts';

/** mulberry32: small, fast, and the same sequence on every platform. */
export class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }
  /** 0 <= n < bound */
  int(bound: number): number {
    return bound <= 0 ? 0 : this.next() % bound;
  }
  chance(p: number): boolean {
    return this.next() / 0x1_0000_0000 < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)] as T;
  }
}

/** Seed for iteration `i` of a run: each input is rebuilt from (runSeed, i) alone. */
export const iterationSeed = (runSeed: number, i: number): number => (Math.imul(runSeed ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(i, 0xc2b2ae35)) >>> 0;

// ─── a JSON tree that can hold what JSON.stringify cannot write ────────────────────────────────

/** Verbatim JSON text: 1e309, -0, a 50,000-deep nesting, a string with raw escapes. */
export class Raw {
  constructor(readonly text: string) {}
}
/** An object as ordered entries, so a key can appear twice. */
export class Obj {
  constructor(readonly entries: Array<[string, J]>) {}
}
export type J = null | boolean | number | string | Raw | Obj | J[];

export function fromPlain(value: unknown): J {
  if (Array.isArray(value)) return value.map(fromPlain);
  if (typeof value === 'object' && value !== null) {
    return new Obj(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [k, fromPlain(v)]));
  }
  return value as J;
}

export function emit(j: J): string {
  if (j instanceof Raw) return j.text;
  if (j instanceof Obj) return `{${j.entries.map(([k, v]) => `${JSON.stringify(k)}:${emit(v)}`).join(',')}}`;
  if (Array.isArray(j)) return `[${j.map(emit).join(',')}]`;
  return JSON.stringify(j);
}

// ─── JSON-tree mutations ────────────────────────────────────────────────────────────────────────

const deep = (depth: number, open = '[', close = ']'): Raw => new Raw(open.repeat(depth) + close.repeat(depth));
const longString = (rng: Rng, n: number): string => rng.pick(['x', 'é', '😀', '\\', '"', 'A']).repeat(n).slice(0, n);

/** Large values: long strings, deep nesting, long arrays. Rare, as each costs milliseconds to build and parse. */
function heavyValue(rng: Rng): J {
  switch (rng.int(4)) {
    case 0:
      return longString(rng, rng.pick([4097, 20_000, 70_000]));
    case 1:
      return rng.chance(0.7) ? deep(rng.pick([2000, 5000])) : deep(rng.pick([20_000, 50_000]), rng.pick(['[', '{"a":']), rng.pick([']', '}']));
    case 2:
      // 70,000 values: past limits.maxHeaderBytes (65,536) of structure for a JSON body.
      return new Raw(`[${Array.from({ length: rng.pick([1000, 5000, 70_000]) }, () => rng.pick(['0', '1', '"x"', 'null', '{}'])).join(',')}]`);
    default:
      return new Obj(Array.from({ length: rng.pick([300, 3000]) }, (_, i) => [`k${i}`, i]));
  }
}

/** Values at every check's edge, of every wrong type, and the hostile ones. */
function edgyValue(rng: Rng): J {
  if (rng.chance(0.03)) return heavyValue(rng);
  switch (rng.int(9)) {
    case 0:
      return rng.pick<J>([null, true, false, [], new Obj([]), new Obj([['a', 1]])]);
    case 1:
      return rng.pick([0, 1, -1, 1.5, 15, 16, 64, 128, 129, 249, 250, 2 ** 31, 2 ** 32, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 2, 8.64e15, 8.64e15 + 2, 1e21, -(2 ** 31), 5e-324]);
    case 2:
      // What JSON.stringify cannot write: overflow to Infinity, negative zero, underflow, forms of one number.
      return new Raw(rng.pick(['1e309', '-1e309', '-0', '-0.0', '0e5', '1e-400', '1.0', '1E0', '0.5e1', '10000000000000000000000', '9007199254740993', '-9007199254740993']));
    case 3:
      return rng.pick(['', 'x', '-bad', 'white space', 'a/b', 'float32', 'float64', 'bool', 'ok', 'invalid', 'resnet50', 'AAAA', 'AA==', '=']);
    case 4:
      // Lone and paired surrogates, NUL, line separators, and lengths at the schema's bounds.
      return rng.pick(['\ud800', 'a\udfff', '\udc00\ud800', '😀', '\u0000', '\u2028\u2029', '\ufeff', 'a'.repeat(64), 'a'.repeat(65), 'a'.repeat(128), 'a'.repeat(129), 'a'.repeat(249), 'a'.repeat(250), 'a'.repeat(256), 'a'.repeat(257)]);
    case 5:
      return longString(rng, rng.pick([100, 1000, 4096]));
    case 6:
      return deep(rng.pick([2, 10, 100]), rng.pick(['[', '{"a":']), rng.pick([']', '}']));
    case 7:
      return new Obj([[rng.pick(['__proto__', 'constructor', 'prototype']), new Obj([['polluted', true], ['priority', 3], ['byteLength', 0]])]]);
    default:
      return rng.chance(0.5)
        ? new Raw(`[${Array.from({ length: rng.pick([9, 20]) }, () => rng.pick(['0', '1', '"x"', 'null', '{}'])).join(',')}]`)
        : Array.from({ length: rng.int(10) }, () => rng.int(5));
  }
}

/** Base64 that is almost right: wrong padding, other alphabets, stray characters, wrong lengths. */
function base64Mutation(rng: Rng, s: string): J {
  const at = rng.int(s.length + 1);
  const long = (): string => 'AAAA'.repeat(1025 + rng.int(4));
  switch (rng.int(12)) {
    case 0:
      return s.replace(/=+$/, '');
    case 1:
      return `${s}=`;
    case 2:
      return `${s.slice(0, at)}${rng.pick(['-', '_', ' ', '\n', '!', 'é', '=', '\u0000', '.'])}${s.slice(at + 1)}`;
    case 3:
      return s.slice(0, Math.max(0, s.length - 4));
    case 4:
      return `${s}AAAA`;
    case 5:
      return s.length >= 4 ? `${s.slice(0, -4)}${rng.pick(['AB==', 'AAB=', 'A===', '====', '=AAA', 'AA=A'])}` : s;
    case 6:
      return s.replace(/\+/g, '-').replace(/\//g, '_');
    case 7: {
      // Past the 4096-character fast path, where only the decoded length is checked.
      const l = long();
      const p = rng.int(l.length);
      return `${l.slice(0, p)}${rng.pick(['-', '_', ' ', '!', 'é', '=', '==', 'A=', '\n'])}${l.slice(p + 1)}`;
    }
    case 8:
      return long();
    case 9:
      return '';
    case 10:
      return new Raw(`"${s.slice(0, at)}\\u00${rng.pick(['41', '3d', '2b', '00'])}${s.slice(at)}"`);
    default:
      return rng.pick<J>([0, null, [s], new Raw('"\\ud800AAA"')]);
  }
}

function numberMutation(rng: Rng, n: number): J {
  switch (rng.int(6)) {
    case 0:
      return n + rng.pick([1, -1, 8, -8]);
    case 1:
      return -n;
    case 2:
      return n * 2 ** rng.int(40);
    case 3:
      return n + 0.5;
    case 4:
      return String(n);
    default:
      return new Raw(rng.pick([`${n}.0`, `${n}e0`, '-0', '1e309', `${n}0000000000`]));
  }
}

interface Slot {
  get(): J;
  set(v: J): void;
  /** The key this value sits under, for targeted mutations (data, byteLength, shape). */
  readonly key: string | undefined;
}

function slots(root: J): Slot[] {
  const out: Slot[] = [];
  const walk = (holder: { v: J }, key: string | undefined, depth: number): void => {
    out.push({ get: () => holder.v, set: (v) => (holder.v = v), key });
    const j = holder.v;
    if (depth > 6) return;
    if (j instanceof Obj) {
      for (const entry of j.entries) {
        const h = {
          get v(): J {
            return entry[1];
          },
          set v(v: J) {
            entry[1] = v;
          },
        };
        walk(h, entry[0], depth + 1);
      }
    } else if (Array.isArray(j)) {
      j.forEach((_, i) => {
        const h = {
          get v(): J {
            return j[i] as J;
          },
          set v(v: J) {
            j[i] = v;
          },
        };
        walk(h, key, depth + 1);
      });
    }
  };
  walk({ v: root }, undefined, 0);
  return out;
}

/** Every object in the tree with the entry list, for key-level mutations. */
function objects(root: J, out: Obj[] = []): Obj[] {
  if (root instanceof Obj) {
    out.push(root);
    for (const [, v] of root.entries) objects(v, out);
  } else if (Array.isArray(root)) {
    for (const v of root) objects(v, out);
  }
  return out;
}

const KEYS = ['id', 'model', 'version', 'priority', 'deadlineAt', 'replyTo', 'streamKey', 'createdAt', 'meta', 'inputs', 'outputs', 'name', 'dtype', 'shape', 'byteLength', 'data', 'status', 'timings', 'error', 'code', 'message'];

/** One mutation of the tree, in place where it can be; returns the new root. */
export function mutateTree(rng: Rng, root: J): J {
  const op = rng.int(10);
  if (op <= 3) {
    const all = slots(root);
    const slot = rng.pick(all);
    const current = slot.get();
    if (slot.key === 'data' && typeof current === 'string' && rng.chance(0.7)) slot.set(base64Mutation(rng, current));
    else if ((slot.key === 'inputs' || slot.key === 'outputs') && Array.isArray(current) && rng.chance(0.5)) {
      // More tensors than limits.maxTensors: copies of a real one, or junk zod finds fault with.
      const item = current[0] !== undefined && rng.chance(0.5) ? emit(current[0]) : rng.pick(['{}', '{"name":1}', 'null', '[]', '"x"']);
      slot.set(new Raw(`[${Array.from({ length: rng.pick([4, 17, 100, 2000]) }, () => item).join(',')}]`));
    }
    else if (typeof current === 'number' && rng.chance(0.6)) slot.set(numberMutation(rng, current));
    else if (Array.isArray(current) && slot.key === 'shape' && rng.chance(0.6)) {
      const shape = [...current];
      if (rng.chance(0.5)) shape.push(rng.pick<J>([1, 0, 2, -1, 1.5, 2 ** 31]));
      else if (shape.length > 0) shape[rng.int(shape.length)] = rng.pick<J>([0, 1, 2, -1, 2 ** 26, 2 ** 53, new Raw('1e309'), '1', null]);
      slot.set(rng.chance(0.02) ? new Raw(`[${Array.from({ length: 20_000 }, () => '"x"').join(',')}]`) : shape);
    } else slot.set(edgyValue(rng));
    return all[0]?.get() ?? root;
  }
  const objs = objects(root);
  if (objs.length === 0) return rng.chance(0.5) ? new Obj([['id', root]]) : root;
  const obj = rng.pick(objs);
  switch (op) {
    case 4:
    case 5:
      // Remove a key.
      if (obj.entries.length > 0) obj.entries.splice(rng.int(obj.entries.length), 1);
      return root;
    case 6: {
      // Duplicate a key: JSON.parse keeps the last one.
      const entry = obj.entries[rng.int(obj.entries.length)];
      if (entry) obj.entries.splice(rng.int(obj.entries.length + 1), 0, [entry[0], rng.chance(0.5) ? edgyValue(rng) : entry[1]]);
      return root;
    }
    case 7:
      // Prototype-pollution and Object.prototype names.
      obj.entries.splice(rng.int(obj.entries.length + 1), 0, [
        rng.pick(['__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__']),
        rng.chance(0.7) ? new Obj([['id', 'evil'], ['polluted', true], ['inputs', []]]) : edgyValue(rng),
      ]);
      return root;
    case 8:
      // A known key in the wrong place or a near miss of one.
      obj.entries.push([rng.pick([...KEYS, 'ID', 'id ', 'Inputs', '', 'extra', '\ud800']), edgyValue(rng)]);
      return root;
    default: {
      // Many keys: an object as wide as the limits allow and beyond.
      const n = rng.chance(0.1) ? 3000 : rng.pick([20, 100]);
      for (let i = 0; i < n; i++) obj.entries.push([`k${i}`, i]);
      return root;
    }
  }
}

// ─── byte mutations ─────────────────────────────────────────────────────────────────────────────

const INTERESTING_U32 = [0, 1, 7, 8, 0x7f, 0xff, 0xffff, 0x10000, 0x10001, 0x7fffffff, 0x80000000, 0xfffffff8, 0xffffffff];
const INTERESTING_BYTES = [0, 1, 0x7f, 0x80, 0xc0, 0xc3, 0xed, 0xf0, 0xf4, 0xff, 0x22, 0x5c, 0x7b, 0x7d, 0x5b, 0x5d, 0x2c, 0x3a, 0x30, 0x2d, 0x65];

export function mutateBytes(rng: Rng, input: Buffer, other: Buffer): Buffer {
  const out = Buffer.from(input);
  const at = rng.int(out.byteLength);
  switch (rng.int(10)) {
    case 0:
    case 1: {
      const flips = 1 + rng.int(8);
      for (let i = 0; i < flips && out.byteLength > 0; i++) {
        const p = rng.int(out.byteLength);
        out[p] = (out[p] ?? 0) ^ (1 << rng.int(8));
      }
      return out;
    }
    case 2:
      if (out.byteLength > 0) out[at] = rng.pick(INTERESTING_BYTES);
      return out;
    case 3:
      return out.subarray(0, rng.int(out.byteLength + 1));
    case 4:
      // The header length field (binary) or the first four bytes (JSON) set to a boundary value.
      if (out.byteLength >= 12) {
        const field = rng.pick([8, 8, 8, 0, 4]);
        const value = rng.chance(0.5) ? rng.pick(INTERESTING_U32) : (out.readUInt32LE(8) + rng.pick([-9, -8, -1, 1, 8, 9, 4096])) >>> 0;
        out.writeUInt32LE(value >>> 0, field);
      }
      return out;
    case 5:
      // Version and kind bytes.
      if (out.byteLength >= 8) out[rng.pick([4, 5, 6, 7])] = rng.pick([0, 1, 2, 3, 0xff]);
      return out;
    case 6: {
      const len = rng.int(Math.min(64, out.byteLength - at) + 1);
      return Buffer.concat([out.subarray(0, at), out.subarray(at + len)]);
    }
    case 7: {
      const ins = Buffer.from(Array.from({ length: 1 + rng.int(16) }, () => (rng.chance(0.5) ? rng.pick(INTERESTING_BYTES) : rng.int(256))));
      return Buffer.concat([out.subarray(0, at), ins, out.subarray(at)]);
    }
    case 8:
      // Splice: the start of one input and the end of another.
      return Buffer.concat([out.subarray(0, at), other.subarray(rng.int(other.byteLength + 1))]);
    default:
      return Buffer.concat([out, Buffer.alloc(rng.pick([1, 7, 8, 64]), rng.int(256))]);
  }
}

// ─── inputs ─────────────────────────────────────────────────────────────────────────────────────

export interface FuzzInput extends SeedInput {
  /** What was done to the seed, for the failure message. */
  readonly recipe: string;
}

/**
 * One fuzz input from one seed: a seed envelope, then tree mutations of its JSON (the frame's
 * header, or the whole JSON body), then byte mutations.
 */
export function fuzzInput(seed: number): FuzzInput {
  const rng = new Rng(seed);
  const base = rng.pick(SEED_INPUTS);
  const steps: string[] = [`${base.kind}/${base.form} seed`];
  let bytes = base.bytes;
  if (rng.chance(0.65)) {
    const split = base.form === 'frame' ? splitFrame(bytes) : undefined;
    let tree = fromPlain(JSON.parse(split ? split.header : bytes.toString('utf8')));
    const n = 1 + rng.int(3);
    for (let i = 0; i < n; i++) tree = mutateTree(rng, tree);
    steps.push(`${n} tree mutation(s)`);
    const text = emit(tree);
    bytes = split ? joinFrame(split.prefix, text, split.tail) : Buffer.from(text, 'utf8');
  }
  if (rng.chance(0.5)) {
    const n = 1 + rng.int(2);
    for (let i = 0; i < n; i++) bytes = mutateBytes(rng, bytes, rng.pick(SEED_INPUTS).bytes);
    steps.push(`${n} byte mutation(s)`);
  }
  return { kind: base.kind, form: base.form, bytes, recipe: steps.join(', ') };
}
