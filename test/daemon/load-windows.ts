// What the load-aware daemon tests share: the traffic's destinations and the wall-clock windows (5 s, the shortest
// loadAware.window) they wait on.
export const WINDOW = 5000;

/** Every address of the three TEST-NET ranges. */
export const DESTINATIONS = ['192.0.2', '198.51.100', '203.0.113'].flatMap((net) =>
  Array.from({ length: 256 }, (_, i) => `${net}.${i}`),
);

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Sleeps until `after` ms past the next wall-clock window boundary (wccpd reads its counters just after it). */
export async function pastNextWindowEnd(after: number): Promise<void> {
  const now = Date.now();
  await sleep(Math.floor(now / WINDOW) * WINDOW + WINDOW + after - now);
}
