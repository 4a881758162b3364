// GET /api/v1/plan: what an engine's join, leave, drain or weight would do, per service or in every service it
// concerns, as the API's view (api-types.ts). The plan itself is the cluster's (cluster/plan.ts).
import { BUCKET_COUNT } from '../buckets/table.js';
import { toMaskValueSets } from '../buckets/mask.js';
import { loadRatio } from '../buckets/load.js';
import type { Cluster, PeerLoads, Plan, PlanChange } from '../cluster/index.js';
import type { PlanView, ServicePlanView } from './api-types.js';

export const PLAN_CHANGES = ['join', 'leave', 'drain', 'weight'] as const;
export type PlanChangeKind = (typeof PLAN_CHANGES)[number];

export interface PlanRequest {
  readonly change: PlanChangeKind;
  readonly engine: string;
  /** join: its Assignment Weight (absent: see cluster/plan.ts); weight: the new weight. */
  readonly weight: number | null;
  /** null: every service the change concerns (join: every configured service). */
  readonly service: number | null;
}

export type PlanAnswer =
  | { readonly ok: true; readonly view: PlanView }
  | { readonly ok: false; readonly status: number; readonly message: string };

const STATUS: Record<string, number> = {
  'unknown-service': 404,
  'unknown-engine': 404,
  'bad-weight': 400,
  'already-member': 409,
  'not-load-aware': 409,
};

/**
 * GET /api/v1/plan?change=rebalance: the load-aware moves the end of the current window would make, per service with
 * loadAware (or the one asked), from the per-bucket counters read now (`counts`, null where none are counted), summed
 * with the peers' load so far where the window's end sums them (`peers`: mode consistent with peers).
 */
export async function rebalanceView(
  cluster: Cluster,
  wall: number,
  service: number | null,
  counts: (service: number) => Promise<readonly { packets: number; bytes: number }[] | null>,
  peers: (service: number) => Promise<PeerLoads | null> = async () => null,
): Promise<PlanAnswer> {
  const ids =
    service !== null
      ? [service]
      : cluster.serviceIds().filter((id) => cluster.service(id) !== null && cluster.loadAware(id)?.loadView() != null);
  if (ids.length === 0)
    return { ok: false, status: 409, message: 'no service uses load-aware assignment (services[].loadAware)' };
  const services: ServicePlanView[] = [];
  for (const id of ids) {
    const [mine, theirs] = await Promise.all([counts(id), peers(id)]);
    const r = cluster.planRebalance(id, wall, mine, theirs);
    if (!r.ok) return { ok: false, status: STATUS[r.error] ?? 400, message: r.message };
    services.push(serviceView(cluster, r.plan));
  }
  return { ok: true, view: { change: 'rebalance', engine: '', weight: null, services } };
}

export function planView(cluster: Cluster, request: PlanRequest): PlanAnswer {
  const { change: kind, engine, weight, service } = request;
  if (kind === 'weight' && weight === null)
    return { ok: false, status: 400, message: 'a weight plan needs the new weight (0-65535)' };
  const change: PlanChange =
    kind === 'join'
      ? { kind, engine, ...(weight !== null ? { weight } : {}) }
      : kind === 'weight'
        ? { kind, engine, weight: weight ?? 0 }
        : { kind, engine };
  const ids = service !== null ? [service] : kind === 'join' ? cluster.serviceIds() : cluster.servicesWith(engine);
  if (ids.length === 0) return { ok: false, status: 404, message: `engine ${engine} is in no service group` };
  const services: ServicePlanView[] = [];
  for (const id of ids) {
    const r = cluster.plan(id, change);
    if (!r.ok) {
      // In every service: one where a newcomer is a member already is left out, not an error.
      if (service === null && r.error === 'already-member') continue;
      return { ok: false, status: STATUS[r.error] ?? 400, message: r.message };
    }
    services.push(serviceView(cluster, r.plan));
  }
  if (services.length === 0)
    return { ok: false, status: 409, message: `engine ${engine} is already in every service group` };
  return { ok: true, view: { change: kind, engine, weight, services } };
}

function serviceView(cluster: Cluster, plan: Plan): ServicePlanView {
  const s = cluster.service(plan.service);
  return {
    service: plan.service,
    mode: s?.mode ?? '',
    authority: s?.authority ?? '',
    assignment: s?.assignment ?? '',
    changeNumber: plan.before.changeNumber,
    after: [...plan.after.buckets],
    moves: plan.moves.map((m) => ({ ...m })),
    engines: plan.engines.map((e) => {
      const l = plan.load?.engines.find((x) => x.address === e.address);
      return {
        ...e,
        shareAfter: e.bucketsAfter / BUCKET_COUNT,
        ...(l !== undefined ? { loadBefore: loadRatio(l, l.before), loadAfter: loadRatio(l, l.after) } : {}),
      };
    }),
    mask: plan.mask === null ? null : { after: toMaskValueSets(plan.mask.after), moves: [...plan.mask.moves] },
    notes: [...plan.notes],
    ...(plan.load !== undefined
      ? {
          load:
            plan.load === null
              ? null
              : {
                  total: plan.load.total,
                  windowEnd: new Date(plan.load.windowEnd).toISOString(),
                  stop: plan.load.stop,
                },
        }
      : {}),
  };
}
