/** Whether `work` settles (either way) within `ms`; the timer never outlives the race. */
export async function settlesWithin(work: Promise<unknown> | undefined, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((r) => (timer = setTimeout(() => r(false), ms)));
  const done = (work ?? Promise.resolve()).then(
    () => true,
    () => true,
  );
  try {
    return await Promise.race([done, late]);
  } finally {
    clearTimeout(timer);
  }
}
