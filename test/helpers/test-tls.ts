// A throwaway CA and a broker certificate signed by it, for the test brokers' TLS listener.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';

export interface TestTls {
  /** PEM CA the clients trust (transport.kafka.ssl.caFile). */
  readonly caFile: string;
  /** PEM private key followed by the certificate: a Kafka PEM keystore. */
  readonly keystoreFile: string;
  readonly keystorePem: string;
}

/** Needs `openssl` on PATH (.ci/run installs it). `hosts`: the names clients dial (SANs). */
export function makeTestTls(dir: string, hosts: readonly string[]): TestTls {
  mkdirSync(dir, { recursive: true });
  const at = (name: string): string => join(dir, name);
  const run = (args: string[]): void => {
    execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 30_000 });
  };
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', at('ca.key'), '-out', at('ca.pem'), '-days', '3', '-subj', '/CN=npu-fleet test CA']);
  run(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', at('broker.key'), '-out', at('broker.csr'), '-subj', '/CN=npu-fleet test broker']);
  const sans = [...new Set(hosts)].map((h) => (isIP(h) ? `IP:${h}` : `DNS:${h}`)).join(',');
  writeFileSync(at('san.ext'), `subjectAltName=${sans}\n`);
  run(['x509', '-req', '-in', at('broker.csr'), '-CA', at('ca.pem'), '-CAkey', at('ca.key'), '-CAcreateserial', '-out', at('broker.crt'), '-days', '3', '-extfile', at('san.ext')]);
  const keystorePem = `${readFileSync(at('broker.key'), 'utf8')}${readFileSync(at('broker.crt'), 'utf8')}`;
  writeFileSync(at('broker-keystore.pem'), keystorePem);
  return { caFile: at('ca.pem'), keystoreFile: at('broker-keystore.pem'), keystorePem };
}
