// A silent host without a firewall: Linux drops a SYN to a listener whose accept queue is full
// (net.ipv4.tcp_abort_on_overflow 0, the default), with no RST and no SYN-ACK, as a host whose
// packets are dropped does. A listener that no longer accepts (its process stopped) and whose queue
// is filled here is such an address: connect() to it neither completes nor fails until the
// client's own timeout or the kernel's SYN retries (about two minutes) give up.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { connect, type Socket } from 'node:net';

/** What a dial of host:port did within a wait: 'connected', 'failed <code>' (refused, reset), or 'no answer'. */
export async function dialWithin(port: number, withinMs: number, host = '127.0.0.1'): Promise<string> {
  const socket = connect(port, host);
  try {
    return await dialOutcome(socket, withinMs);
  } finally {
    socket.destroy();
  }
}

function dialOutcome(socket: Socket, withinMs: number): Promise<string> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve('no answer'), withinMs);
    socket.once('connect', () => (clearTimeout(timer), resolve('connected')));
    socket.once('error', (err: NodeJS.ErrnoException) => (clearTimeout(timer), resolve(`failed ${err.code ?? err.message}`)));
  });
}

export interface FilledAcceptQueue {
  /** Connections now waiting in the listener's accept queue (its backlog + 1 on Linux). */
  readonly connections: number;
  /** Closes them (the listener, once it accepts again, sees them closed). */
  release(): void;
}

/**
 * Fills the accept queue of a listener on host:port that does not accept (its process stopped
 * with SIGSTOP), one connection at a time, until a dial gets no answer within `hangMs`; from then
 * on every new dial to it is silent. Throws when `maxConnections` did not fill it (a listener that
 * still accepts, or a backlog larger than that).
 */
export async function fillAcceptQueue(port: number, o: { host?: string; hangMs?: number; maxConnections?: number } = {}): Promise<FilledAcceptQueue> {
  const host = o.host ?? '127.0.0.1';
  // A loopback connect completes in well under a millisecond; the margin is for a loaded machine.
  const hangMs = o.hangMs ?? 300;
  const max = o.maxConnections ?? 2_048;
  const held: Socket[] = [];
  const release = (): void => {
    for (const s of held.splice(0)) s.destroy();
  };
  for (let i = 0; i <= max; i++) {
    const socket = connect(port, host);
    socket.on('error', () => undefined);
    const outcome = await dialOutcome(socket, hangMs);
    if (outcome === 'connected') {
      held.push(socket);
      continue;
    }
    socket.destroy();
    if (outcome === 'no answer' && held.length > 0) return { connections: held.length, release };
    release();
    throw new Error(`filling the accept queue of ${host}:${port}: dial ${i + 1} ${outcome}`);
  }
  release();
  throw new Error(`filling the accept queue of ${host}:${port}: ${max} connections did not fill it (does the listener still accept?)`);
}

/**
 * This process's dials to `port` on IPv4 that wait for an answer now (TCP state SYN_SENT): the
 * connections a client keeps trying against a silent listener, which no server-side count (CLIENT
 * LIST) can show. Only sockets this process holds count: other processes dial it too (the other
 * sentinels re-dial a silent sentinel: 2 more SYN_SENT sockets to it were seen machine-wide).
 */
export function pendingDials(port: number): number {
  const SYN_SENT = '02';
  const own = new Set<string>();
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
      if (m !== null) own.add(m[1]!);
    } catch {
      // Closed since the listing.
    }
  }
  return readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter(([, , remote, state, , , , , , inode]) => state === SYN_SENT && parseInt(remote?.split(':')[1] ?? '', 16) === port && own.has(inode ?? '')).length;
}
