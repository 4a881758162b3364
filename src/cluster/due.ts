// The cluster and the warm-up policy run on an injected clock: each part says when it next needs a tick (nextDue),
// and its owner asks for the earliest of its parts' times. control/timers.ts sleeps until then.

/** The earliest of these due times (ms on the injected clock); null when none is due. */
export function earliestDue(times: Iterable<number | null>): number | null {
  let due: number | null = null;
  for (const at of times) if (at !== null && (due === null || at < due)) due = at;
  return due;
}
