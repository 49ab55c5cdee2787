import { checkQuery, ListingBuilder, replayHeaders, replayTarget, ReplayTally, requestFacts, type DeadLetter, type DeadLetterListing, type DeadLetterQuery, type DeadLetters, type ReplayOptions, type ReplayReport } from '../dead-letters.ts';
import { HEADERS, MEMORY_NAMES, renderName } from '../names.ts';
import type { MemoryBroker, MemoryMessage } from './memory-broker.ts';

/**
 * The in-process broker's DLQ (see DeadLetters): records are waiting messages of `{model}.dlq`;
 * a replayed one is taken out of it. JS thread only; everything is synchronous underneath.
 */
export class MemoryDeadLetters implements DeadLetters {
  constructor(private readonly broker: MemoryBroker) {}

  async list(query: DeadLetterQuery): Promise<DeadLetterListing> {
    checkQuery(query);
    const listing = new ListingBuilder(query);
    for (const { letter } of this.read(query.model)) listing.add(letter);
    return listing.build();
  }

  async replay(options: ReplayOptions): Promise<ReplayReport> {
    checkQuery(options);
    const tally = new ReplayTally(options);
    const replayed: string[] = [];
    try {
      for (const { letter, message } of this.read(options.model)) {
        if (tally.stopping()) break;
        if (!tally.read(letter)) continue;
        if (tally.stopsAtLimit()) break;
        tally.matched++;
        const target = replayTarget(letter, { template: MEMORY_NAMES.requests, model: options.model, nowMs: Date.now(), priorityRequired: true, priority: options.priority });
        if ('why' in target) {
          tally.skipped.push({ ref: letter.ref, why: target.why });
          continue;
        }
        if (options.dryRun !== true) {
          this.broker.send(target.source, [{ body: message.body, key: message.key, priority: target.priority, headers: replayHeaders(message.headers, letter.ref) }]);
          replayed.push(message.id);
        }
        tally.replayed++;
        tally.progress();
      }
    } catch (err) {
      throw tally.failed(err, `replaying the DLQ of ${options.model} failed`);
    } finally {
      // Also after a failed send: what was re-sent must leave the DLQ, or the next run sends it twice.
      this.broker.remove(renderName(MEMORY_NAMES.dlq, options.model), replayed);
    }
    tally.progress(true);
    return tally.report();
  }

  async close(): Promise<void> {}

  private *read(model: string): Generator<{ letter: DeadLetter; message: MemoryMessage }> {
    // A snapshot in arrival order: what replay re-sends and dead-letters again is not read again.
    const messages = this.broker.peek(renderName(MEMORY_NAMES.dlq, model)).sort((a, b) => a.seq - b.seq);
    for (const message of messages) {
      const sourceId = message.headers[HEADERS.dlqSource];
      const hash = sourceId?.lastIndexOf('#') ?? -1;
      const priorityText = message.headers[HEADERS.dlqPriority];
      const priority = priorityText === undefined ? undefined : Number(priorityText);
      yield {
        message,
        letter: {
          ref: message.id,
          reason: message.headers[HEADERS.dlqReason] ?? '',
          message: message.headers[HEADERS.dlqMessage] ?? '',
          source: sourceId !== undefined && hash > 0 ? sourceId.slice(0, hash) : undefined,
          priority: priority !== undefined && Number.isInteger(priority) && priority >= 0 ? priority : undefined,
          ...requestFacts(message.body),
          deadAt: message.enqueuedAt,
          bytes: message.body.byteLength,
        },
      };
    }
  }
}
