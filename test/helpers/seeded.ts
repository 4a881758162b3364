// mulberry32: a small seeded generator, so a test that draws random inputs tries the same ones every run and a
// failure reproduces.

/** Uniform 32-bit unsigned integers. */
export function seededUint32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** Uniform numbers in [0, 1). */
export function seededUnit(seed: number): () => number {
  const next = seededUint32(seed);
  return () => next() / 4294967296;
}
