// How a changed service's table reaches the data plane (docs/dataplane/nft.md, "How a change reaches the kernel"): the
// services that changed, batched into one apply, split when refused, each failure retried on its own, and the table
// in force recorded. Also the one projection of a service group onto what a backend needs (ServiceRedirect), and,
// for a backend in the IP hooks, the br_netfilter watch after every change.
import type { EngineAddress } from '../buckets/table.js';
import type { MaskValueSet } from '../buckets/mask.js';
import type { Log } from '../log.js';
import {
  DEFAULT_FAMILIES,
  IP_PROTOCOL,
  ServiceFlag,
  type AddressFamily,
  type FailMode,
  type ForwardingMethod,
  type ServiceProtocol,
} from '../vocabulary.js';
import { BridgeNetfilterWatch, type CheckBridgeNetfilter } from './kernel/bridge-netfilter.js';
import type { BridgeNetfilterState } from './kernel/bridge-netfilter.js';
import type { Redirector, ServiceRedirect } from './redirector.js';

/** What the projection reads of a service's configuration (the config's ServiceConfig has these). */
export interface RedirectConfig {
  readonly id: number;
  readonly protocol: ServiceProtocol;
  readonly ports: readonly number[];
  readonly portsSource: boolean;
  readonly priority: number | null;
  readonly forwarding: ForwardingMethod;
  readonly failMode: FailMode;
  readonly clientInterfaces: readonly string[];
  /** Absent: IPv4 only. */
  readonly families?: readonly AddressFamily[];
}

/** What the projection reads of the cluster's routes of the group (its ServiceRoutes has these). */
export interface RedirectRoutes {
  readonly definition: { readonly flags: number; readonly priority: number } | null;
  readonly table: ServiceRedirect['table'];
  /** Mask assignment services only. */
  readonly maskSets?: readonly MaskValueSet[];
  /**
   * The engines that keep a route: besides those in the table, draining and suspect ones (connections already steered
   * to them finish there, docs/architecture.md, stickiness), any that still holds buckets while a table change waits
   * for timers.settle, and, through a restart grace, those of the persisted table not heard yet (their connections
   * from before the restart carry their slot's mark, docs/operations.md, "Upgrade").
   */
  readonly targets: readonly EngineAddress[];
}

/** A service group as the data plane sees it. */
export function redirectOf(cfg: RedirectConfig, routes: RedirectRoutes): ServiceRedirect {
  return {
    serviceId: cfg.id,
    protocol: IP_PROTOCOL[cfg.protocol],
    ports: cfg.ports,
    portsAreSource: cfg.portsSource,
    serviceFlags: routes.definition?.flags ?? ServiceFlag.DST_IP_HASH,
    priority: cfg.priority ?? routes.definition?.priority ?? 0,
    forwarding: cfg.forwarding,
    failMode: cfg.failMode,
    clientInterfaces: cfg.clientInterfaces,
    families: cfg.families ?? DEFAULT_FAMILIES,
    table: routes.table,
    engines: routes.targets,
    ...(routes.maskSets !== undefined ? { maskSets: routes.maskSets } : {}),
  };
}

/** The table in force of a service: its change number and when it was applied (docs/api.md). */
export interface InForce {
  readonly changeNumber: number;
  readonly at: string;
}

export interface ApplyPipelineOptions {
  readonly redirector: Redirector;
  readonly log: Log;
  /** Wall time (ms) for the in-force record. */
  readonly wall: () => number;
  /** The configured services now (a reload may change them), as the projection reads them. */
  readonly services: () => readonly RedirectConfig[];
  /** A service group's routes now (null: not known). */
  readonly routes: (id: number) => RedirectRoutes | null;
  /** One observation per data-plane apply: how long it took and whether all of it came into force. */
  readonly observe?: (seconds: number, ok: boolean) => void;
  /** Replaces the br_netfilter check (tests). */
  readonly checkBridgeNetfilter?: CheckBridgeNetfilter;
}

/** A changed service's table waiting for the data plane, and the key it is applied under (applied). */
interface PendingApply {
  readonly id: number;
  readonly redirect: ServiceRedirect;
  readonly key: string;
}

export class ApplyPipeline {
  private applying: Promise<void> = Promise.resolve();
  private readonly dirty = new Set<number>();
  /** Per service, what the data plane last applied without error: an identical redirect is not applied again. */
  private readonly applied = new Map<number, string>();
  private readonly inForce = new Map<number, InForce>();
  /** Per service: the delay before the next retry of a failed apply (doubles up to 30 s), and its timer. */
  private readonly retries = new Map<number, { delayMs: number; timer: ReturnType<typeof setTimeout> | null }>();
  private stopping = false;
  /** Only for backends that put rules in the IP hooks. */
  private readonly bridges: BridgeNetfilterWatch | null;

  constructor(private readonly options: ApplyPipelineOptions) {
    this.bridges =
      options.redirector.inIpHooks === true
        ? new BridgeNetfilterWatch({ log: options.log, check: options.checkBridgeNetfilter })
        : null;
  }

  /** The services whose tables changed: applied together as soon as the data plane is free. */
  changed(ids: Iterable<number>): Promise<void> {
    for (const id of ids) this.dirty.add(id);
    return this.applyDirty();
  }

  /** A configured service group as the data plane sees it now (null: not configured). */
  redirect(id: number): ServiceRedirect | null {
    const routes = this.options.routes(id);
    const cfg = this.options.services().find((s) => s.id === id);
    return routes && cfg ? redirectOf(cfg, routes) : null;
  }

  /** The table in force of a service, or null before its first apply (or with a backend that redirects nothing). */
  tableInForce(id: number): InForce | null {
    return this.inForce.get(id) ?? null;
  }

  /** The last br_netfilter check (null: not yet, or a backend without rules in the IP hooks). */
  bridgeNetfilter(): BridgeNetfilterState | null {
    return this.bridges?.state() ?? null;
  }

  /** Looks at br_netfilter again (also done after every change made). */
  checkBridges(): Promise<void> {
    if (this.bridges === null) return Promise.resolve();
    const engines = new Set<string>();
    const clientInterfaces = new Set<string>();
    for (const { id } of this.options.services()) {
      const r = this.redirect(id);
      for (const e of r?.engines ?? []) engines.add(e);
      for (const i of r?.clientInterfaces ?? []) clientInterfaces.add(i);
    }
    return this.bridges.look({ clientInterfaces: [...clientInterfaces], engines: [...engines] });
  }

  /**
   * A service no longer configured (a config reload): its redirection removed, in turn with the applies (so an apply
   * of it queued before cannot put it back), and what was recorded of it forgotten. A failure is logged: the removal
   * is tried again at the next reload or stop.
   */
  removed(id: number): Promise<void> {
    this.dirty.delete(id);
    const retry = this.retries.get(id);
    if (retry?.timer) clearTimeout(retry.timer);
    this.retries.delete(id);
    this.applying = this.applying.then(async () => {
      this.applied.delete(id);
      this.inForce.delete(id);
      try {
        await this.options.redirector.removeService(id);
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        this.options.log.error({ service: id, err: error }, `data plane: removing service ${id} failed: ${error}`);
      }
    });
    return this.applying;
  }

  /** No more retries. */
  stop(): void {
    this.stopping = true;
    for (const r of this.retries.values()) if (r.timer) clearTimeout(r.timer);
  }

  /** Resolves when the applies asked for so far are done. */
  idle(): Promise<void> {
    return this.applying;
  }

  /**
   * Applies the tables of the changed services in ONE data-plane apply (nft: one transaction), so services decided at
   * the same moment (a TPROXY pair whose engine died) come into force together; changes that arrive meanwhile are
   * coalesced into the next one. A batch the data plane refuses is applied again at once one service at a time, so a
   * service whose table is refused keeps no other service's change out; each that still fails retries on its own
   * (scheduleRetry) and joins whatever batch is due then.
   */
  private applyDirty(): Promise<void> {
    this.applying = this.applying.then(async () => {
      const ids = [...this.dirty].sort((a, b) => a - b);
      this.dirty.clear();
      const batch: PendingApply[] = [];
      for (const id of ids) {
        const redirect = this.redirect(id);
        if (redirect === null) continue;
        const key = JSON.stringify(redirect);
        // Engine-state events that change nothing the data plane sees (a flapping engine whose buckets wait for
        // timers.settle) cost no transaction.
        if (this.applied.get(id) === key) continue;
        batch.push({ id, redirect, key });
      }
      if (batch.length === 0) return;
      if (!(await this.applyBatch(batch)) && batch.length > 1) for (const one of batch) await this.applyBatch([one]);
      // Engines come and go, and an admin may change the sysctl: look again after every change we made.
      await this.checkBridges();
    });
    return this.applying;
  }

  /**
   * One data-plane apply of `batch` (one observation of the apply metric); true when all of it is in force. A lone
   * service that fails is retried later; a batch that fails is left to the caller, which splits it.
   */
  private async applyBatch(batch: readonly PendingApply[]): Promise<boolean> {
    const { redirector, log } = this.options;
    const started = performance.now();
    try {
      await redirector.applyAll(batch.map((b) => b.redirect));
    } catch (err) {
      this.options.observe?.((performance.now() - started) / 1000, false);
      const error = err instanceof Error ? err.message : String(err);
      const [only] = batch;
      if (batch.length === 1 && only !== undefined) this.scheduleRetry(only.id, error);
      else {
        const ids = batch.map((b) => b.id).join(', ');
        log.warn(
          { services: batch.map((b) => b.id), err: error },
          `data plane apply of services ${ids} together failed (their previous tables stay in force); applying each on its own: ${error}`,
        );
      }
      return false;
    }
    this.options.observe?.((performance.now() - started) / 1000, true);
    const at = new Date(this.options.wall()).toISOString();
    for (const { id, redirect, key } of batch) {
      this.applied.set(id, key);
      if (redirector.redirectsNothing !== true) this.inForce.set(id, { changeNumber: redirect.table.changeNumber, at });
      const retry = this.retries.get(id);
      if (retry) {
        if (retry.timer) clearTimeout(retry.timer);
        this.retries.delete(id);
        log.info({ service: id }, `data plane apply for service ${id} succeeded after earlier failures`);
      }
    }
    return true;
  }

  /**
   * A failed apply leaves the previous table in force (applies are atomic); try again with a growing delay, so the
   * data plane catches up with the cluster once the cause (a busy nft, a missing route) goes away.
   */
  private scheduleRetry(id: number, error: string): void {
    const previous = this.retries.get(id);
    if (previous?.timer) return;
    const delayMs = Math.min(30_000, (previous?.delayMs ?? 500) * 2);
    this.options.log.error(
      { service: id, err: error, retryInMs: delayMs },
      `data plane apply failed for service ${id} (previous table stays in force; retrying in ${delayMs} ms): ${error}`,
    );
    if (this.stopping) return;
    const timer = setTimeout(() => {
      this.retries.set(id, { delayMs, timer: null });
      this.dirty.add(id);
      void this.applyDirty();
    }, delayMs);
    timer.unref();
    this.retries.set(id, { delayMs, timer });
  }
}
