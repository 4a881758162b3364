// The skewed destination mix of bench/load-aware.ts: Zipf over TEST-NET destination addresses. Rank r (1-based) is
// drawn with probability proportional to 1 / r^s; which address gets which rank is a seeded shuffle, so the hot
// addresses (and so the hot buckets) fall on engines as they happen to, not by design. Shared by the client (which
// draws from it) and the bench (which prints what it expects of it).
import { bucketOf } from '../../test/lab/addresses.js';
import { seededUnit } from '../../test/helpers/seeded.js';

/**
 * 198.51.100.0/24 (one address per bucket: the WCCP hash is the XOR of the four bytes) and 203.0.113.64/26 (64 more,
 * a second address in 64 of the buckets); the lab's origin answers for both, outside the client's 203.0.113.0/28.
 */
export function destinations(): string[] {
  return [
    ...Array.from({ length: 256 }, (_, i) => `198.51.100.${i}`),
    ...Array.from({ length: 64 }, (_, i) => `203.0.113.${64 + i}`),
  ];
}

export interface Mix {
  /** The addresses, hottest first (rank 1 = index 0). */
  readonly addresses: readonly string[];
  /** Each address's probability, in the same order (sums to 1). */
  readonly weights: readonly number[];
  /** Each bucket's probability (sums to 1). */
  readonly buckets: readonly number[];
}

export function zipfMix(exponent: number, seed: number): Mix {
  const addresses = destinations();
  const random = seededUnit(seed);
  for (let i = addresses.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [addresses[i], addresses[j]] = [addresses[j] as string, addresses[i] as string];
  }
  const raw = addresses.map((_, r) => 1 / (r + 1) ** exponent);
  const total = raw.reduce((a, b) => a + b, 0);
  const weights = raw.map((w) => w / total);
  const buckets = new Array<number>(256).fill(0);
  addresses.forEach((a, r) => (buckets[bucketOf(a)] = (buckets[bucketOf(a)] ?? 0) + (weights[r] ?? 0)));
  return { addresses, weights, buckets };
}

/** Draws addresses from `mix` (index into mix.addresses), from a seeded generator of its own. */
export function sampler(mix: Mix, seed: number): () => number {
  const cumulative: number[] = [];
  let sum = 0;
  for (const w of mix.weights) cumulative.push((sum += w));
  const random = seededUnit(seed);
  return () => {
    const u = random() * sum;
    let lo = 0;
    let hi = cumulative.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cumulative[mid] ?? 0) > u) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
}

/** max / mean of per-engine loads (equal weights: the mean is every engine's fair share); NaN when all are 0. */
export function maxOverMean(loads: readonly number[]): number {
  const mean = loads.reduce((a, b) => a + b, 0) / loads.length;
  return mean > 0 ? Math.max(...loads) / mean : NaN;
}
