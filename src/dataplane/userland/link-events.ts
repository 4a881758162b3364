// What the userland backend does on `ip monitor` events: a link in use that went down or was deleted gets its pcap
// sessions reopened once it is up again (a native session on such a link captures nothing any more, silently), and
// after a link, address or route change every L2 engine is looked up again, so the traffic of one that moved to
// another device follows it (docs/userland.md, "A link flap" and "An engine that moves").
import type { EngineAddress } from '../../buckets/table.js';
import type { Log } from '../../log.js';
import type { RateLimitedLog } from '../../rate-limited-log.js';
import { DataplaneError } from '../errors.js';
import type { ServiceRedirect } from '../redirector.js';
import { offLinkError } from '../kernel/routes.js';
import type { UserlandCounters } from './counters.js';
import type { Links } from './links.js';
import { planeOf, type Plane, type ServiceState } from './plane.js';
import type { PacketSessions } from './sessions.js';

/**
 * A line of `ip monitor link` naming a link and whether it is up (administratively: IFF_UP); null for anything else
 * (address lines, continuation lines). A deleted link is not up.
 */
export function parseLinkLine(line: string): { device: string; up: boolean } | null {
  const m = /^(Deleted )?\d+: ([^:@\s]+)(?:@\S*)?: <([^>]*)>/.exec(line);
  if (m === null) return null;
  return { device: m[2]!, up: m[1] === undefined && m[3]!.split(',').includes('UP') };
}

export interface LinkEventsOptions {
  readonly sessions: PacketSessions;
  readonly counters: UserlandCounters;
  readonly links: Links | undefined;
  readonly log: Log;
  readonly limited: RateLimitedLog;
  /** The backend's plane and started flag, read and swapped where it keeps them. */
  readonly plane: () => Plane;
  readonly setPlane: (plane: Plane) => void;
  readonly started: () => boolean;
  /** Prepares the services again and swaps them in (the apply, already in the change queue). */
  readonly reapply: (services: readonly ServiceRedirect[]) => Promise<void>;
}

export class LinkEvents {
  /** Links in use that went down or were deleted since their sessions were opened, with why (for the log). */
  private readonly linksDown = new Map<string, string>();
  /** The last state `ip monitor` told of each link in linksDown. */
  private readonly linkUp = new Map<string, boolean>();

  constructor(private readonly o: LinkEventsOptions) {}

  clear(): void {
    this.linksDown.clear();
    this.linkUp.clear();
  }

  /**
   * A line of `ip monitor link`: a link in use that goes down or is deleted is remembered (a native pcap session on
   * it captures nothing from then on, even once it is up again; an injection session fails on a re-created one), with
   * the last state told, for reopenFlapped().
   */
  line(line: string): void {
    const l = parseLinkLine(line);
    if (l === null || !this.usesDevice(l.device)) return;
    if (line.startsWith('Deleted')) this.linksDown.set(l.device, 'was deleted');
    else if (!l.up && !this.linksDown.has(l.device)) this.linksDown.set(l.device, 'went down');
    if (!this.linksDown.has(l.device)) return;
    this.linkUp.set(l.device, l.up);
    if (!l.up)
      this.o.limited.warn(
        l.device,
        'userland-link-down',
        { dataplane: 'userland', device: l.device, why: this.linksDown.get(l.device) },
        `userland: ${l.device} ${this.linksDown.get(l.device)}: nothing is captured or injected there until it is up`,
      );
  }

  /**
   * Reopens the sessions on the links that went down or were deleted and are up again. Runs in the apply queue, at
   * most once a second (the link watch's gap), so a link flapping in a loop costs one reopen a second.
   */
  async reopenFlapped(): Promise<void> {
    if (!this.o.started()) return;
    for (const [device, why] of [...this.linksDown]) {
      if (!this.usesDevice(device)) {
        this.linksDown.delete(device);
        this.linkUp.delete(device);
        continue;
      }
      // Still down, or deleted and not back: its sessions wait for the line telling it is up.
      if (this.linkUp.get(device) !== true) continue;
      this.linksDown.delete(device);
      this.linkUp.delete(device);
      try {
        await this.reopenOn(device, why);
      } catch (e) {
        if (!this.o.started()) return; // stop() ran meanwhile: nothing to reopen
        // Tried again at the next link event.
        this.linksDown.set(device, why);
        this.linkUp.set(device, true);
        this.o.limited.warn(
          device,
          'userland-reopen-failed',
          { dataplane: 'userland', device, error: (e as Error).message },
          `userland could not reopen its pcap sessions on ${device}: ${(e as Error).message}`,
        );
      }
    }
  }

  /**
   * After a link, address or route change (in the apply queue, at most once a second): every L2 engine looked up again
   * in one `ip -batch`; the services of an engine now on another device are prepared again (its MAC learnt there) and
   * swapped in, with a log line per engine; one no longer on-link is reported with the error its join would get, and
   * its frames still go out of the device it was on until it is on-link again (docs/userland.md, "An engine that
   * moves").
   */
  async followEngines(): Promise<void> {
    const lookup = this.o.links?.engineSegments;
    if (!this.o.started() || lookup === undefined) return;
    const on = new Map<EngineAddress, string>();
    for (const st of this.o.plane().ordered)
      if (st.mode === 'redirect') for (const [engine, t] of st.l2) on.set(engine, t.device);
    if (on.size === 0) return;
    const segments = await lookup([...on.keys()]);
    const moved = new Map<EngineAddress, { from: string; to: string }>();
    const offLink = new Map<EngineAddress, DataplaneError>();
    for (const [engine, segment] of segments) {
      const from = on.get(engine);
      if ('error' in segment) offLink.set(engine, segment.error);
      else if (from !== undefined && from !== segment.dev) moved.set(engine, { from, to: segment.dev });
    }
    if (moved.size > 0) {
      const services = this.o
        .plane()
        .ordered.filter((st) => st.mode === 'redirect' && [...st.l2.keys()].some((e) => moved.has(e)))
        .map((st) => st.service);
      await this.o.reapply(services);
      const moves = this.o.counters.moves;
      for (const [engine, m] of moved) {
        moves.enginesMoved++;
        this.o.log.warn(
          { dataplane: 'userland', engine, from: m.from, to: m.to, enginesMoved: moves.enginesMoved },
          `engine ${engine} moved from ${m.from} to ${m.to}: its redirected traffic follows it ` +
            `(its frames now go out ${m.to})`,
        );
      }
    }
    if (offLink.size > 0) throw offLinkError(offLink, on);
  }

  /** True when the backend captures or injects on `device`, or reaches an engine through it (L2). */
  private usesDevice(device: string): boolean {
    if (this.o.sessions.hasInjector(device)) return true;
    for (const st of this.o.plane().ordered) {
      if (st.captures.has(device)) return true;
      for (const t of st.l2.values()) if (t.device === device) return true;
    }
    return false;
  }

  private async reopenOn(device: string, why: string): Promise<void> {
    const plane = this.o.plane();
    const replaced = new Map<ServiceState, ServiceState>();
    try {
      for (const st of plane.ordered) {
        if (!st.captures.has(device)) continue;
        const session = this.o.sessions.openCapture(st.service, device);
        replaced.set(st, { ...st, captures: new Map(st.captures).set(device, session) });
      }
    } catch (e) {
      for (const st of replaced.values()) st.captures.get(device)?.close();
      throw e;
    }
    this.o.setPlane(planeOf(plane.ordered.map((st) => replaced.get(st) ?? st)));
    for (const st of replaced.keys()) {
      st.captures.get(device)?.close();
      this.reopened(device, `service ${st.service.serviceId}`, why, 'capture');
    }
    if (this.o.sessions.reopenInjector(device, this.o.plane()))
      this.reopened(device, 'L2 forwarding', why, 'injection');
    // A re-created link has a new MAC, and so may the engine behind it: resolved again (captures kept).
    if (why !== 'was deleted') return;
    const l2 = this.o
      .plane()
      .ordered.filter((st) => st.mode === 'redirect' && [...st.l2.values()].some((t) => t.device === device));
    await this.o.reapply(l2.map((st) => st.service));
  }

  private reopened(device: string, what: string, why: string, kind: 'capture' | 'injection'): void {
    const capturesReopened = ++this.o.counters.counts.capturesReopened;
    this.o.log.info(
      { dataplane: 'userland', device, session: kind, for: what, why, capturesReopened },
      `userland reopened its ${kind} session on ${device} (${what}): ${device} ${why} and is up again`,
    );
  }
}
