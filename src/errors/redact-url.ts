/**
 * A URL's userinfo (scheme://user:password@host) as it may go into a message or a log line:
 * transport.bullmq.redisUrl carries the Redis password there, a proxy URL might. The user name
 * stays (it tells which login was used); a lone userinfo (scheme://token@host) is a token and goes.
 * Up to the last '@' before whitespace or a quote: a password with an unescaped '@', '/' or '#'
 * (a URL ioredis or Node refuses, and so the one most likely quoted in an error) goes whole; a
 * later '@' in the same word (a path's) costs only the host shown.
 */
const USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)([^\s"']*)@/gi;

export const REDACTED_PASSWORD = '***';

/** The placeholders of the hints that show how to write a URL (redis://[user:password@]host:port): no login to hide. */
const PLACEHOLDER_USERINFO = new Set(['user:password', '[user:password', ':password']);

export function redactUrl(text: string): string {
  // Most text holds no URL: one scan for the scheme separator first.
  if (!text.includes('://') || !text.includes('@')) return text;
  return text.replace(USERINFO, (match: string, scheme: string, userinfo: string) => {
    if (PLACEHOLDER_USERINFO.has(userinfo)) return match;
    const colon = userinfo.indexOf(':');
    return colon < 0 ? `${scheme}${REDACTED_PASSWORD}@` : `${scheme}${userinfo.slice(0, colon)}:${REDACTED_PASSWORD}@`;
  });
}
