// Package entry of `npu-fleet/producer` (and `npu-fleet`): the Producer API of src/producer/index.ts
// for services that depend on this package. The package runs its TypeScript through tsx at run
// time (as bin/npu-fleet.js does); tsImport loads the producer's module graph in a namespace of its
// own, so the importing process's other modules are not run through tsx. Types: the "types"
// condition of package.json points at src/producer/index.ts.
//
// Keep the names below in step with the runtime exports of src/producer/index.ts
// (test/integration/producer/package-entry.test.ts compares the two).
import { tsImport } from 'tsx/esm/api';

const api = await tsImport('../src/producer/index.ts', import.meta.url);

export const {
  createProducer,
  BullmqProducer,
  KafkaProducer,
  MemoryProducer,
  ReplyRouter,
  FleetError,
  tensorView,
  bytesOf,
  loadFleetConfig,
  parseFleetConfig,
} = api;
