/**
 * Seeded PRNG for reproducible weights and test inputs. mulberry32 uses only 32-bit integer
 * arithmetic, and the derived floats use only +, *, / (correctly rounded), so every platform
 * produces the same bits.
 */
export class Prng {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1) with 32 bits of resolution. */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  uniform(low: number, high: number): number {
    return low + (high - low) * this.next();
  }

  /** Integer in [low, high). */
  int(low: number, high: number): number {
    return low + Math.floor(this.next() * (high - low));
  }

  float32Array(count: number, low: number, high: number): Float32Array {
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = this.uniform(low, high);
    return out;
  }

  int64Array(count: number, low: number, high: number): BigInt64Array {
    const out = new BigInt64Array(count);
    for (let i = 0; i < count; i++) out[i] = BigInt(this.int(low, high));
    return out;
  }
}
