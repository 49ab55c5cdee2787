/** A Redis error answer (not a lost connection): out of memory, a read-only replica, a script error. */
export function isRedisRefusal(err: Error): boolean {
  return err.name === 'ReplyError';
}
