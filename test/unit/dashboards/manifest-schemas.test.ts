import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ClusterTriggerAuthentication } from '@kubernetes-models/keda/keda.sh/v1alpha1/ClusterTriggerAuthentication';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject';
import { TriggerAuthentication } from '@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Secret } from 'kubernetes-models/v1/Secret';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';

// Every document of dashboards/kubernetes/*.yaml and dashboards/keda/*.yaml is checked against the
// schema of its apiVersion/kind, as kubernetes-models (generated from Kubernetes' OpenAPI schema) and
// @kubernetes-models/keda (generated from KEDA's API types, which its CRDs are generated from)
// publish it, in two parts:
// - the model's validate(): types, enums, formats and required fields;
// - unknownFields(): every key must be a property the library's type declares, or sit in a map.
//   validate() lets unknown keys through (its schemas do not set additionalProperties: false), so a
//   misspelt optional field such as `pollingIntervall` passes it; this is what catches misspellings.
// KEDA trigger metadata is a string map in the CRD; scalerMetadataErrors() holds its keys to the
// scaler's documented parameters.

const ROOT = join(import.meta.dirname, '../../..');
const MANIFEST_DIRS = ['dashboards/kubernetes', 'dashboards/keda'];
type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

interface ModelClass {
  new (data: never): { validate(): void };
}
// The kinds a manifest here may hold; a new kind needs its model and type added.
const MODELS: Record<string, { model: ModelClass; module: string; type: string }> = {
  'v1/ConfigMap': { model: ConfigMap, module: 'kubernetes-models/v1/ConfigMap', type: 'IConfigMap' },
  'v1/Secret': { model: Secret, module: 'kubernetes-models/v1/Secret', type: 'ISecret' },
  'apps/v1/Deployment': { model: Deployment, module: 'kubernetes-models/apps/v1/Deployment', type: 'IDeployment' },
  'keda.sh/v1alpha1/ScaledObject': { model: ScaledObject, module: '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject', type: 'IScaledObject' },
  'keda.sh/v1alpha1/TriggerAuthentication': {
    model: TriggerAuthentication,
    module: '@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication',
    type: 'ITriggerAuthentication',
  },
  'keda.sh/v1alpha1/ClusterTriggerAuthentication': {
    model: ClusterTriggerAuthentication,
    module: '@kubernetes-models/keda/keda.sh/v1alpha1/ClusterTriggerAuthentication',
    type: 'IClusterTriggerAuthentication',
  },
};

// Metadata keys each KEDA scaler documents (KEDA 2.x docs, "Parameter list" of the scaler's page).
// Credentials are not here: they come from a TriggerAuthentication, never from metadata.
const SCALER_METADATA_KEYS: Record<string, readonly string[]> = {
  // https://keda.sh/docs/2.18/scalers/apache-kafka/
  kafka: [
    'bootstrapServers', 'consumerGroup', 'topic', 'lagThreshold', 'activationLagThreshold', 'offsetResetPolicy',
    'allowIdleConsumers', 'scaleToZeroOnInvalidOffset', 'excludePersistentLag', 'limitToPartitionsWithLag',
    'ensureEvenDistributionOfPartitions', 'version', 'partitionLimitation', 'sasl', 'saslTokenProvider', 'tls',
    'unsafeSsl', 'awsRegion',
  ],
  // https://keda.sh/docs/2.16/scalers/redis-lists/ (type `redis`, a list's length)
  redis: [
    'address', 'host', 'port', 'usernameFromEnv', 'passwordFromEnv', 'listName', 'listLength', 'activationListLength',
    'enableTLS', 'unsafeSsl', 'databaseIndex', 'addressFromEnv', 'hostFromEnv', 'portFromEnv',
  ],
  // https://keda.sh/docs/2.18/scalers/prometheus/ (authModes: "specify this in trigger configuration";
  // awsRegion and identityOwner: the page's Amazon Managed Service for Prometheus example)
  prometheus: [
    'serverAddress', 'query', 'threshold', 'activationThreshold', 'namespace', 'customHeaders', 'ignoreNullValues',
    'queryParameters', 'unsafeSsl', 'timeout', 'authModes', 'awsRegion', 'identityOwner',
  ],
};

// The library's declared types, read with the TypeScript checker from a program that only imports
// them (built once: about a second).
let typeChecker: { checker: ts.TypeChecker; types: Map<string, ts.Type> } | undefined;
function declaredTypes(): NonNullable<typeof typeChecker> {
  if (typeChecker !== undefined) return typeChecker;
  const entries = Object.entries(MODELS);
  const fileName = join(ROOT, 'test/unit/dashboards/manifest-types.generated.ts');
  const source = entries.map(([, m], i) => `import type { ${m.type} as T${i} } from '${m.module}';\nexport type K${i} = T${i};`).join('\n');
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, ...rest) =>
    name === fileName ? ts.createSourceFile(name, source, ts.ScriptTarget.ES2022) : getSourceFile.call(host, name, ...rest);
  host.fileExists = (name) => name === fileName || fileExists.call(host, name);
  host.readFile = (name) => (name === fileName ? source : readFile.call(host, name));
  const program = ts.createProgram([fileName], options, host);
  const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  if (problems.length > 0) throw new Error(`cannot read the model types: ${problems.join('; ')}`);
  const checker = program.getTypeChecker();
  const file = program.getSourceFile(fileName);
  const types = new Map<string, ts.Type>();
  for (const statement of file?.statements ?? []) {
    if (!ts.isTypeAliasDeclaration(statement)) continue;
    const entry = entries[Number(statement.name.text.slice(1))];
    if (entry !== undefined) types.set(entry[0], checker.getTypeAtLocation(statement.name));
  }
  typeChecker = { checker, types };
  return typeChecker;
}

/** Paths of keys in `value` that `type` does not declare (maps, i.e. string index signatures, take any key). */
function unknownFields(checker: ts.TypeChecker, value: unknown, type: ts.Type, path: string): string[] {
  if (typeof value !== 'object' || value === null) return [];
  const t = checker.getNonNullableType(type);
  if (t.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown)) return [];
  const members = t.isUnion() ? t.types : [t];
  if (Array.isArray(value)) {
    const arrayType = members.find((m) => checker.isArrayType(m));
    const element = arrayType === undefined ? undefined : checker.getTypeArguments(arrayType as ts.TypeReference)[0];
    // Not an array where one belongs: validate() reports the type.
    return element === undefined ? [] : value.flatMap((v, i) => unknownFields(checker, v, element, `${path}[${i}]`));
  }
  const objects = members.filter((m) => (m.flags & ts.TypeFlags.Object) !== 0 && !checker.isArrayType(m));
  if (objects.length === 0) return [];
  return Object.entries(value).flatMap(([key, v]) => {
    const property = objects.map((o) => checker.getPropertyOfType(o, key)).find((p) => p !== undefined);
    const next =
      property !== undefined
        ? checker.getTypeOfSymbol(property)
        : objects.map((o) => checker.getIndexInfoOfType(o, ts.IndexKind.String)?.type).find((x) => x !== undefined);
    const at = path === '' ? key : `${path}.${key}`;
    if (next === undefined) {
      const known = objects.flatMap((o) => checker.getPropertiesOfType(o).map((p) => p.name));
      return [`${at}: unknown field (${checker.typeToString(objects[0] ?? t)} has ${known.join(', ')})`];
    }
    return unknownFields(checker, v, next, at);
  });
}

function scalerMetadataErrors(doc: Obj): string[] {
  const spec = isObj(doc.spec) ? doc.spec : {};
  const triggers = Array.isArray(spec.triggers) ? spec.triggers : [];
  return triggers.flatMap((trigger: unknown, i) => {
    if (!isObj(trigger) || !isObj(trigger.metadata)) return [];
    const allowed = SCALER_METADATA_KEYS[String(trigger.type)];
    if (allowed === undefined) {
      return [`spec.triggers[${i}]: no documented metadata keys for scaler type '${String(trigger.type)}' (add them to SCALER_METADATA_KEYS)`];
    }
    return Object.keys(trigger.metadata)
      .filter((k) => !allowed.includes(k))
      .map((k) => `spec.triggers[${i}].metadata.${k}: not a documented '${String(trigger.type)}' scaler parameter (${allowed.join(', ')})`);
  });
}

/** Everything wrong with one manifest document against its kind's schema; [] if nothing. */
function manifestErrors(doc: unknown): string[] {
  if (!isObj(doc)) return ['not a mapping'];
  const key = `${String(doc.apiVersion)}/${String(doc.kind)}`;
  const entry = MODELS[key];
  if (entry === undefined) return [`no schema for apiVersion/kind ${key} (known: ${Object.keys(MODELS).join(', ')})`];
  const errors: string[] = [];
  try {
    new entry.model(doc as never).validate();
  } catch (err) {
    errors.push(`schema: ${(err as Error).message}`);
  }
  const { checker, types } = declaredTypes();
  const type = types.get(key);
  if (type === undefined) throw new Error(`no declared type for ${key}`);
  errors.push(...unknownFields(checker, doc, type, ''));
  if (doc.kind === 'ScaledObject') errors.push(...scalerMetadataErrors(doc));
  return errors;
}

const manifestFiles = MANIFEST_DIRS.flatMap((dir) =>
  readdirSync(join(ROOT, dir))
    .filter((f) => /\.ya?ml$/.test(f) && !/\.test\.ya?ml$/.test(f))
    .map((f) => `${dir}/${f}`),
);
const documentsOf = (file: string): Obj[] =>
  parseAllDocuments(readFileSync(join(ROOT, file), 'utf8')).map((d) => {
    if (d.errors.length > 0) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
    return d.toJS() as Obj;
  });
const firstOfKind = (file: string, kind: string): Obj => {
  const found = documentsOf(file).find((d) => d.kind === kind);
  if (found === undefined) throw new Error(`${file} has no ${kind}`);
  return found;
};
// Walks the parsed copy by path; a missing step throws, so a negative case cannot go stale silently.
const at = (root: unknown, ...path: (string | number)[]): Obj => {
  let node: unknown = root;
  for (const step of path) {
    node = (node as Record<string | number, unknown>)[step];
    if (typeof node !== 'object' || node === null) throw new Error(`no object at ${path.join('.')}`);
  }
  return node as Obj;
};
const rename = (node: Obj, from: string, to: string): void => {
  if (!(from in node)) throw new Error(`no ${from} to rename`);
  node[to] = node[from];
  delete node[from];
};

/** The errors of a parsed copy of `doc` changed by `mutate`: the manifest on disk stays as it is. */
const errorsOfMutated = (doc: Obj, mutate: (copy: Obj) => void): string[] => {
  const copy = structuredClone(doc);
  mutate(copy);
  return manifestErrors(copy);
};
type Case = [name: string, mutate: (copy: Obj) => void, expected: RegExp];

describe('Kubernetes and KEDA manifests against their schemas', () => {
  it('finds the manifests: the worker ConfigMap and Deployment and every ScaledObject', () => {
    const kinds = manifestFiles.flatMap((f) => documentsOf(f).map((d) => `${f}: ${String(d.kind)}`));
    expect(kinds).toEqual(expect.arrayContaining(['dashboards/kubernetes/worker.yaml: ConfigMap', 'dashboards/kubernetes/worker.yaml: Deployment']));
    expect(kinds.filter((k) => k.endsWith(': ScaledObject')).length).toBeGreaterThanOrEqual(4);
    expect(manifestFiles.some((f) => f.endsWith('.test.yml'))).toBe(false);
  });

  it.each(manifestFiles)('%s: every document is valid for its apiVersion/kind', (file) => {
    const errors = documentsOf(file).flatMap((doc, i) => manifestErrors(doc).map((e) => `${file} document ${i + 1} (${String(doc.kind)}): ${e}`));
    expect(errors).toEqual([]);
  });

  it('fails a kind it has no schema for, naming it', () => {
    expect(manifestErrors({ apiVersion: 'v1', kind: 'ConfigMapp', metadata: { name: 'x' } })).toEqual([
      expect.stringContaining('no schema for apiVersion/kind v1/ConfigMapp'),
    ]);
    expect(manifestErrors({ apiVersion: 'keda.sh/v1', kind: 'ScaledObject' })[0]).toContain('no schema');
  });

  describe('bites on a broken Deployment', () => {
    const deployment = firstOfKind('dashboards/kubernetes/worker.yaml', 'Deployment');
    const pod = (d: Obj): Obj => at(d, 'spec', 'template', 'spec');
    const container = (d: Obj): Obj => at(pod(d), 'containers', 0);

    it('passes the real one (the base the mutations start from)', () => {
      expect(manifestErrors(deployment)).toEqual([]);
    });

    it.each<Case>([
      ['a misspelt probe field', (d) => rename(at(container(d), 'livenessProbe', 'httpGet'), 'port', 'prot'), /livenessProbe\.httpGet\.prot: unknown field/],
      ['a misspelt optional field', (d) => rename(at(container(d), 'readinessProbe'), 'periodSeconds', 'periodSecond'), /readinessProbe\.periodSecond: unknown field/],
      ['a misspelt pod spec field', (d) => rename(pod(d), 'terminationGracePeriodSeconds', 'terminationGracePeriod'), /template\.spec\.terminationGracePeriod: unknown/],
      ['a field at the wrong level', (d) => void (at(d, 'spec').containers = []), /^spec\.containers: unknown field/],
      ['a misspelt volume source field', (d) => rename(at(pod(d), 'volumes', 0, 'configMap'), 'name', 'nme'), /volumes\[0\]\.configMap\.nme: unknown field/],
      ['a misspelt env var field', (d) => rename(at(container(d), 'env', 0), 'value', 'valeu'), /env\[0\]\.valeu: unknown field/],
      ['a misspelt object metadata field', (d) => rename(at(d, 'metadata'), 'labels', 'label'), /^metadata\.label: unknown field/],
      ['replicas as a string', (d) => void (at(d, 'spec').replicas = 'one'), /spec\/replicas must be integer/],
      ['a port number as an object', (d) => void (at(container(d), 'ports', 0).containerPort = { port: 9464 }), /containerPort must be integer/],
      ['a probe scheme outside the enum', (d) => void (at(container(d), 'startupProbe', 'httpGet').scheme = 'HTTPX'), /scheme must be equal to one of the allowed/],
      ['no container name', (d) => void delete container(d).name, /containers\/0 must have required property name/],
      ['no selector', (d) => void delete at(d, 'spec').selector, /spec must have required property selector/],
    ])('%s', (_name, mutate, expected) => {
      expect(errorsOfMutated(deployment, mutate)).toContainEqual(expect.stringMatching(expected));
    });
  });

  describe('bites on a broken ConfigMap', () => {
    const configMap = firstOfKind('dashboards/kubernetes/worker.yaml', 'ConfigMap');
    it.each<Case>([
      ['a data value that is not a string', (c) => void (at(c, 'data')['fleet.yaml'] = { transport: {} }), /data\/fleet\.yaml must be string/],
      ['a misspelt top-level key', (c) => rename(c, 'data', 'dat'), /^dat: unknown field/],
    ])('%s', (_name, mutate, expected) => {
      expect(errorsOfMutated(configMap, mutate)).toContainEqual(expect.stringMatching(expected));
    });
  });

  describe('bites on a broken ScaledObject', () => {
    const kafka = firstOfKind('dashboards/keda/scaledobject-kafka.yaml', 'ScaledObject');
    const redis = firstOfKind('dashboards/keda/scaledobject-bullmq.yaml', 'ScaledObject');
    const prometheus = firstOfKind('dashboards/keda/scaledobject-backlog.yaml', 'ScaledObject');
    const bases: Record<string, Obj> = { kafka, redis, prometheus };
    const metadata = (so: Obj, i = 0): Obj => at(so, 'spec', 'triggers', i, 'metadata');

    it('passes the real ones (the bases the mutations start from)', () => {
      expect([kafka, redis, prometheus].flatMap(manifestErrors)).toEqual([]);
    });

    it.each<[base: string, ...Case]>([
      ['kafka', 'a misspelt spec field', (s) => rename(at(s, 'spec'), 'pollingInterval', 'pollingIntervall'), /^spec\.pollingIntervall: unknown field/],
      ['kafka', 'a misspelt scaleTargetRef.name', (s) => rename(at(s, 'spec', 'scaleTargetRef'), 'name', 'nam'), /scaleTargetRef\.nam: unknown field/],
      [
        'kafka',
        'a misspelt HPA behavior field',
        (s) => rename(at(s, 'spec', 'advanced', 'horizontalPodAutoscalerConfig', 'behavior', 'scaleDown'), 'stabilizationWindowSeconds', 'stabilisationWindowSeconds'),
        /scaleDown\.stabilisationWindowSeconds: unknown field/,
      ],
      ['prometheus', 'a misspelt trigger field', (s) => rename(at(s, 'spec', 'triggers', 0), 'metadata', 'metdata'), /triggers\[0\]\.metdata: unknown field/],
      ['kafka', 'no scaleTargetRef.name', (s) => void delete at(s, 'spec', 'scaleTargetRef').name, /scaleTargetRef must have required property name/],
      ['redis', 'no triggers', (s) => void delete at(s, 'spec').triggers, /spec must have required property triggers/],
      ['redis', 'a replica count as a string', (s) => void (at(s, 'spec').minReplicaCount = '1'), /spec\/minReplicaCount must be integer/],
      ['kafka', 'a metadata value that is not a string', (s) => void (metadata(s).lagThreshold = 2000), /metadata\/lagThreshold must be string/],
      ['kafka', 'a misspelt kafka metadata key', (s) => rename(metadata(s), 'lagThreshold', 'lagTreshold'), /metadata\.lagTreshold: not a documented 'kafka'/],
      ['redis', 'a misspelt redis metadata key', (s) => rename(metadata(s, 1), 'listName', 'listname'), /triggers\[1\]\.metadata\.listname: not a documented 'redis'/],
      ['prometheus', 'a misspelt prometheus metadata key', (s) => rename(metadata(s), 'serverAddress', 'serverAdress'), /metadata\.serverAdress: not a documented/],
      ['prometheus', "another scaler's key", (s) => void (metadata(s).lagThreshold = '10'), /metadata\.lagThreshold: not a documented 'prometheus'/],
      ['kafka', 'a scaler type without a key list', (s) => void (at(s, 'spec', 'triggers', 0).type = 'kafak'), /no documented metadata keys for scaler type 'kafak'/],
    ])('%s: %s', (base, _name, mutate, expected) => {
      expect(errorsOfMutated(bases[base] ?? {}, mutate)).toContainEqual(expect.stringMatching(expected));
    });
  });

  it('bites on a broken TriggerAuthentication', () => {
    const auth: Obj = {
      apiVersion: 'keda.sh/v1alpha1',
      kind: 'TriggerAuthentication',
      metadata: { name: 'npu-fleet-kafka' },
      spec: { secretTargetRef: [{ parameter: 'password', name: 'npu-fleet-kafka', key: 'password' }] },
    };
    expect(manifestErrors(auth)).toEqual([]);
    expect(errorsOfMutated(auth, (a) => rename(at(a, 'spec', 'secretTargetRef', 0), 'parameter', 'param'))).toEqual(
      expect.arrayContaining([expect.stringMatching(/secretTargetRef\[0\]\.param: unknown field/), expect.stringMatching(/required property parameter/)]),
    );
  });
});
