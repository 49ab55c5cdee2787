/**
 * How far a phase that reads a file has got (lines, and bytes of the file), advanced by the phase as
 * it reads. The phase keeps no timer of its own: the command reads this on its progress interval.
 */
export interface LineCounter {
  lines: number;
  bytes: number;
}

export const newLineCounter = (): LineCounter => ({ lines: 0, bytes: 0 });
