/**
 * What a kafkajs producer has written to, and when it must be replaced by a fresh one.
 *
 * Why: a kafkajs producer refreshes metadata for every topic it ever sent to and never forgets one
 * (tulios/kafkajs#651, #1622), and a worker sends to every reply topic its requests name. Once one
 * of those is deleted (a client's private inbox is deleted when the client closes) each later
 * refresh, which comes with every new reply topic and at the metadata max age, either re-creates
 * it (broker auto-create on) or fails (auto-create off, the default on managed Kafka), and a
 * failed refresh fails the send whatever its own topics: the worker publishes nothing, for good.
 * A long-lived producer client meets the same with a retired model's request topics. A fresh
 * producer knows no topics, so RotatingProducer starts one before kafkajs would refresh with a
 * topic that is gone, and whenever the set grows past a bound.
 *
 * JS thread; called by RotatingProducer one check at a time.
 */
export class ProducerTopics {
  private readonly sentTo = new Set<string>();
  private checkedAt = -Infinity;
  private suspect = false;

  constructor(
    /** Every topic the cluster has now (one admin round trip). */
    private readonly listTopics: () => Promise<readonly string[]>,
    private readonly options: { readonly maxTopics?: number; readonly checkEveryMs?: number } = {},
  ) {}

  get size(): number {
    return this.sentTo.size;
  }

  /**
   * Before sending to `topics`: whether the producer must be replaced first, and which topics it
   * sent to are gone (the caller forgets them as created, so a later result to one creates it
   * again like any first use). Checks the cluster only when kafkajs is about to refresh anyway (a
   * topic new to this producer), at most every `checkEveryMs` otherwise, and after a send failed
   * on an unknown topic.
   */
  async beforeSend(topics: Iterable<string>, nowMs: number): Promise<{ fresh: boolean; gone: string[] }> {
    if (this.sentTo.size === 0) {
      // A producer's first send: the interval starts with it.
      this.checkedAt = nowMs;
      return { fresh: false, gone: [] };
    }
    let added = 0;
    for (const t of new Set(topics)) if (!this.sentTo.has(t)) added++;
    if (this.sentTo.size + added > (this.options.maxTopics ?? 1_000)) return { fresh: true, gone: [] };
    if (added === 0 && !this.suspect && nowMs - this.checkedAt < (this.options.checkEveryMs ?? 60_000)) return { fresh: false, gone: [] };
    this.checkedAt = nowMs;
    this.suspect = false;
    const existing = new Set(await this.listTopics());
    const gone = [...this.sentTo].filter((t) => !existing.has(t));
    return { fresh: gone.length > 0, gone };
  }

  /** Topics handed to a send (kafkajs adds them to its set before sending). */
  record(topics: Iterable<string>): void {
    for (const t of topics) this.sentTo.add(t);
  }

  /** A fresh producer took over: it knows no topics. */
  reset(): void {
    this.sentTo.clear();
  }

  /** A send failed on an unknown topic: check the cluster before the next one. */
  markSuspect(): void {
    this.suspect = true;
  }
}
