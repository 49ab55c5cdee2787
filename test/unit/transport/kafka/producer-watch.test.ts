import { describe, expect, it } from 'vitest';
import { ProducerWatch } from '../../../../src/transport/kafka/producer-watch.ts';

const WINDOW_MS = 6_000;

describe('ProducerWatch', () => {
  it('delivers while nothing was ever sent, however long', () => {
    const w = new ProducerWatch(WINDOW_MS);
    expect(w.delivering(0)).toBe(true);
    expect(w.delivering(10 * WINDOW_MS)).toBe(true);
  });

  it('a send held in flight (kafkajs retrying an unreachable leader) for longer than the window is not delivering', () => {
    const w = new ProducerWatch(WINDOW_MS);
    w.onAttempt(1_000);
    expect(w.delivering(1_000 + WINDOW_MS)).toBe(true);
    expect(w.delivering(1_001 + WINDOW_MS)).toBe(false);
    w.onSuccess(30_000);
    expect(w.delivering(30_000)).toBe(true);
  });

  it('failing sends retried for longer than the window are not delivering; the next success is', () => {
    const w = new ProducerWatch(WINDOW_MS);
    let t = 0;
    // Fail after 1 s, retry after a 2 s backoff, as OutcomePublisher does.
    for (; t < 9_000; t += 3_000) {
      w.onAttempt(t);
      w.onFailure(t + 1_000);
    }
    expect(w.delivering(t - 2_000)).toBe(false);
    w.onAttempt(t);
    expect(w.delivering(t + 500)).toBe(false);
    w.onSuccess(t + 600);
    expect(w.delivering(t + 600)).toBe(true);
  });

  it('a streak nobody continues for a window no longer counts, and the next attempt starts a new one', () => {
    const w = new ProducerWatch(WINDOW_MS);
    w.onAttempt(0);
    w.onFailure(7_000);
    expect(w.delivering(7_000)).toBe(false);
    // Nothing to send since: idle is not unready.
    expect(w.delivering(7_000 + WINDOW_MS + 1)).toBe(true);
    w.onAttempt(20_000);
    expect(w.delivering(20_001)).toBe(true);
    w.onFailure(20_100);
    expect(w.delivering(20_000 + WINDOW_MS)).toBe(true);
    w.onAttempt(22_000);
    expect(w.delivering(20_001 + WINDOW_MS)).toBe(false);
  });

  it('a streak starting right after a success is timed from its own first attempt', () => {
    const w = new ProducerWatch(WINDOW_MS);
    w.onAttempt(0);
    w.onFailure(100);
    w.onAttempt(200);
    w.onSuccess(300);
    // Within the window of the old failure: a new streak, not the old one (from 0) continued.
    w.onAttempt(5_000);
    w.onFailure(5_100);
    expect(w.delivering(5_200)).toBe(true);
    expect(w.delivering(5_000 + WINDOW_MS)).toBe(true);
    expect(w.delivering(5_001 + WINDOW_MS)).toBe(false);
  });

  it('a success while another send is in flight restarts the clock for that one', () => {
    const w = new ProducerWatch(WINDOW_MS);
    w.onAttempt(0);
    w.onAttempt(100);
    w.onSuccess(4_000);
    expect(w.delivering(4_000 + WINDOW_MS)).toBe(true);
    expect(w.delivering(4_001 + WINDOW_MS)).toBe(false);
  });
});
