/**
 * Offsets of one topic-partition between "handed to the runtime" and "committed". Kafka commits a
 * single position per partition, while the runtime finishes requests out of order (priority,
 * batching), so the position may only move over the contiguous prefix of finished messages.
 *
 * Offsets are JS numbers: exact up to 2^53, far beyond any real partition.
 * Kafka offsets are not contiguous (compaction, transaction markers), so the prefix is over the
 * messages actually delivered, in delivery order, not over offset + 1.
 */
type State = 'open' | 'settled' | 'released';

interface Entry<T> {
  readonly offset: number;
  state: State;
  /** Payload carried until the entry leaves through the committed prefix (EOS results). */
  payload: T | undefined;
}

export interface Prefix<T> {
  /** Offset to commit: one past the last message of the prefix. */
  readonly commitNext: number;
  /** Entries in the prefix (pass to advance()). */
  readonly count: number;
  /** Payloads of the prefix, in offset order. */
  readonly payloads: T[];
}

export class PartitionTracker<T = undefined> {
  private entries: Array<Entry<T>> = [];
  private head = 0;
  private readonly byOffset = new Map<number, Entry<T>>();
  /** Highest offset ever delivered; re-fetched offsets at or below it are duplicates. */
  private highest = -1;
  private open = 0;

  /** Messages delivered and neither settled nor released. */
  get inflight(): number {
    return this.open;
  }

  get highestDelivered(): number {
    return this.highest;
  }

  /** Where a commit now may point: the first delivery not yet committed (else one past the highest). */
  get uncommittedFrom(): number {
    return this.entries[this.head]?.offset ?? this.highest + 1;
  }

  /** Records a delivery; false when the offset was delivered before (kafkajs re-fetch after a rebalance). */
  deliver(offset: number): boolean {
    if (offset <= this.highest) return false;
    this.highest = offset;
    const entry: Entry<T> = { offset, state: 'open', payload: undefined };
    this.entries.push(entry);
    this.byOffset.set(offset, entry);
    this.open++;
    return true;
  }

  settle(offset: number, payload?: T): boolean {
    const e = this.byOffset.get(offset);
    if (e === undefined || e.state !== 'open') return false;
    e.state = 'settled';
    e.payload = payload;
    this.open--;
    return true;
  }

  /** Re-opens a settled entry whose publication failed (it may be settled again or released). */
  unsettle(offset: number): void {
    const e = this.byOffset.get(offset);
    if (e === undefined || e.state !== 'settled') return;
    e.state = 'open';
    e.payload = undefined;
    this.open++;
  }

  /** Released work is redelivered by the broker, so the commit position must never pass it. */
  release(offset: number): boolean {
    const e = this.byOffset.get(offset);
    if (e === undefined || e.state !== 'open') return false;
    e.state = 'released';
    this.open--;
    return true;
  }

  /** The settled prefix (at most `maxCount` entries), without consuming it; undefined when it is empty. */
  prefix(maxCount = Infinity): Prefix<T> | undefined {
    const payloads: T[] = [];
    let last: Entry<T> | undefined;
    let count = 0;
    for (let i = this.head; i < this.entries.length && count < maxCount; i++) {
      const e = this.entries[i];
      if (e === undefined || e.state !== 'settled') break;
      last = e;
      count++;
      if (e.payload !== undefined) payloads.push(e.payload);
    }
    return last === undefined ? undefined : { commitNext: last.offset + 1, count, payloads };
  }

  /** Drops the first `count` entries (a prefix that is now committed). */
  advance(count: number): void {
    for (let i = 0; i < count; i++) {
      const e = this.entries[this.head];
      if (e === undefined) break;
      this.byOffset.delete(e.offset);
      this.head++;
    }
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
  }

  takePrefix(): Prefix<T> | undefined {
    const p = this.prefix();
    if (p !== undefined) this.advance(p.count);
    return p;
  }

  /** Payloads of settled entries stuck behind an unsettled or released one. */
  stuckPayloads(): T[] {
    const out: T[] = [];
    for (let i = this.head; i < this.entries.length; i++) {
      const e = this.entries[i];
      if (e?.state === 'settled' && e.payload !== undefined) out.push(e.payload);
    }
    return out;
  }
}
