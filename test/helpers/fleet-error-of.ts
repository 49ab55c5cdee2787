import { FleetError } from '../../src/errors/fleet-error.ts';

/** The FleetError `fn` throws; anything else (or nothing thrown) fails the test. */
export function fleetErrorOf(fn: () => unknown): FleetError {
  try {
    fn();
  } catch (err) {
    if (err instanceof FleetError) return err;
    throw err;
  }
  throw new Error('expected a FleetError');
}
