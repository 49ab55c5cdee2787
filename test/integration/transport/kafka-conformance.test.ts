import { assertTransportConformance } from './conformance.ts';
import { kafkaHarness } from './kafka-harness.ts';

assertTransportConformance(() => kafkaHarness());
