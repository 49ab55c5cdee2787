import { checkQuery, ListingBuilder, ReplayTally, requestIdOf, sourcePriority, type DeadLetter, type DeadLetterListing, type DeadLetterQuery, type DeadLetters, type ReplayOptions, type ReplayReport } from '../dead-letters.ts';
import { HEADERS, MEMORY_NAMES, renderName } from '../names.ts';
import type { MemoryBroker, MemoryMessage } from './memory-broker.ts';

/**
 * The in-process broker's DLQ (see DeadLetters): records are waiting messages of `{model}.dlq`;
 * a replayed one is taken out of it. JS thread only; everything is synchronous underneath.
 */
export class MemoryDeadLetters implements DeadLetters {
  constructor(private readonly broker: MemoryBroker) {}

  list(query: DeadLetterQuery): Promise<DeadLetterListing> {
    checkQuery(query);
    const listing = new ListingBuilder(query);
    for (const { letter } of this.read(query.model)) listing.add(letter);
    return Promise.resolve(listing.build());
  }

  replay(options: ReplayOptions): Promise<ReplayReport> {
    checkQuery(options);
    const dlq = renderName(MEMORY_NAMES.dlq, options.model);
    const tally = new ReplayTally(options);
    for (const { letter, message } of this.read(options.model)) {
      if (!tally.read(letter)) continue;
      if (tally.full) break;
      tally.matched++;
      const priority = letter.priority ?? options.priority;
      if (letter.source === undefined || sourcePriority(MEMORY_NAMES.requests, options.model, letter.source) === null) {
        tally.skipped.push({ ref: letter.ref, why: `its source ${letter.source ?? '(none recorded)'} is not a request queue of ${options.model}` });
        continue;
      }
      if (priority === undefined) {
        tally.skipped.push({ ref: letter.ref, why: 'no priority recorded; give one (--priority)' });
        continue;
      }
      tally.replayed++;
      tally.progress();
      if (options.dryRun === true) continue;
      const headers: Record<string, string> = { [HEADERS.replayOf]: letter.ref };
      for (const [k, v] of Object.entries(message.headers)) if (!k.startsWith('npu-fleet-dlq-')) headers[k] = v;
      this.broker.send(letter.source, [{ body: message.body, key: message.key, priority, headers }]);
      this.broker.remove(dlq, [message.id]);
    }
    tally.progress(true);
    return Promise.resolve(tally.report());
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  private *read(model: string): Generator<{ letter: DeadLetter; message: MemoryMessage }> {
    // A snapshot in arrival order: replay removes records as it goes.
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
          requestId: requestIdOf(message.body),
          deadAt: message.enqueuedAt,
          bytes: message.body.byteLength,
        },
      };
    }
  }
}
