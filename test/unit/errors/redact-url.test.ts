import { describe, expect, it } from 'vitest';
import { redactUrl } from '../../../src/errors/redact-url.ts';

describe('redactUrl', () => {
  it('censors the password of every URL in a text, keeping the user and where it points', () => {
    expect(redactUrl('redis://fleet:s3cr3t@10.0.0.5:6379/0')).toBe('redis://fleet:***@10.0.0.5:6379/0');
    expect(redactUrl('a (rediss://:s3cr3t@h:6380) and http://u:s3cr3t@proxy:3128/x')).toBe('a (rediss://:***@h:6380) and http://u:***@proxy:3128/x');
    expect(redactUrl('https://s3cr3t-token@github.example/x')).toBe('https://***@github.example/x');
  });

  it('a password with an unescaped @, / or # (a URL Node and ioredis refuse) goes whole', () => {
    for (const url of ['redis://fleet:s3@cr3t@h:1', 'redis://fleet:s3/cr3t@h:1', 'redis://fleet:s3#cr3t@h:1', 'redis://fleet:s3?cr3t@h:1']) {
      expect(redactUrl(url)).toBe('redis://fleet:***@h:1');
    }
  });

  it('leaves text without a URL login as it was', () => {
    for (const text of ['Redis at 10.0.0.5:6379', 'ops@example.com', 'redis://10.0.0.5:6379/0', 'see https://example.com/x, mail a@b']) {
      expect(redactUrl(text)).toBe(text);
    }
  });
});

describe('redactUrl: the hints that show how to write a URL', () => {
  it('keep their placeholders', () => {
    for (const hint of ['write it as redis://[user:password@]host:port[/db]', '(redis://user:password@host:port; a password alone: redis://:password@host:port)']) {
      expect(redactUrl(hint)).toBe(hint);
    }
  });
});
