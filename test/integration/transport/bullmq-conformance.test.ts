import { bullmqHarness } from './bullmq-harness.ts';
import { runTransportConformance } from './conformance.ts';

runTransportConformance(() => bullmqHarness());
