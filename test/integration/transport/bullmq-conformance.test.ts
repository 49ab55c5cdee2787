import { bullmqHarness } from './bullmq-harness.ts';
import { assertTransportConformance } from './conformance.ts';

assertTransportConformance(() => bullmqHarness());
