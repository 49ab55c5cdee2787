import { runTransportConformance } from './conformance.ts';
import { kafkaHarness } from './kafka-harness.ts';

runTransportConformance(() => kafkaHarness());
