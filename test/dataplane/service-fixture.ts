// A ServiceRedirect for the standard web-cache service, with a table built from a rule per bucket, and Mask/Value Sets.
import { maskValue, maskValueCount, type MaskElement, type MaskValueSet } from '../../src/buckets/mask.js';
import type { EngineAddress } from '../../src/buckets/table.js';
import type { ServiceRedirect } from '../../src/dataplane/redirector.js';

export function webCache(
  owner: (bucket: number) => EngineAddress | null,
  engines: readonly EngineAddress[],
  over: Partial<ServiceRedirect> = {},
): ServiceRedirect {
  return {
    serviceId: 0,
    protocol: 6,
    ports: [80],
    portsAreSource: false,
    serviceFlags: 0x2,
    priority: 0,
    forwarding: 'l2',
    failMode: 'open',
    clientInterfaces: ['c0'],
    engines,
    table: { changeNumber: 1, buckets: Array.from({ length: 256 }, (_, b) => owner(b)) },
    ...over,
  };
}

/** One Mask/Value Set: value i of `mask` -> owner(i); null values are left out (no value: forwarded normally). */
export function maskSet(mask: MaskElement, owner: (i: number) => EngineAddress | null): MaskValueSet {
  const values = [];
  for (let i = 0; i < maskValueCount(mask); i++) {
    const engine = owner(i);
    if (engine === null) continue;
    const [sourceAddress, destinationAddress, sourcePort, destinationPort] = maskValue(mask, i);
    values.push({ sourceAddress, destinationAddress, sourcePort, destinationPort, engine });
  }
  return { mask, values };
}

/**
 * What `ip -j -force -batch -` prints for the `route get ENGINE` lines of `input` (the nft backend checks each L2
 * engine that way): every engine on-link via br0, unless `via` names its router.
 */
export function fakeRouteGets(input: string | undefined, via: Record<string, string> = {}): string {
  return (input ?? '')
    .split('\n')
    .flatMap((l) => {
      const m = /^route get (\S+)$/.exec(l);
      if (m === null) return [];
      const e = m[1] ?? '';
      return [JSON.stringify([{ dst: e, dev: 'br0', prefsrc: '192.0.2.1', ...(via[e] ? { gateway: via[e] } : {}) }])];
    })
    .map((l) => `${l}\n`)
    .join('');
}

/** A clock and a timer the test moves by hand. */
export function fakeTimers() {
  let t = 1_000_000;
  const pending: { at: number; fn: () => void; cancelled: boolean }[] = [];
  return {
    now: () => t,
    setTimer: (fn: () => void, ms: number) => {
      const p = { at: t + ms, fn, cancelled: false };
      pending.push(p);
      return {
        cancel: () => {
          p.cancelled = true;
        },
      };
    },
    /** Moves the clock and fires what is due. */
    advance(ms: number): void {
      t += ms;
      for (const p of pending.splice(0)) {
        if (p.cancelled) continue;
        if (p.at <= t) p.fn();
        else pending.push(p);
      }
    },
    waiting: () => pending.filter((p) => !p.cancelled).length,
  };
}
