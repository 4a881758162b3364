// The HTTP API's routes, as a table: method, path pattern, whether the bearer token is needed, handler. Handlers read
// the admin model and send commands through it (the cluster's own entry points). Contract: docs/api.md.
import type { AdminModel, CommandOutcome } from './model.js';
import type { Metrics } from './metrics.js';
import { PAGE_HTML } from './page.js';
import { isIpAddress, isIpv4 } from '../address.js';
import { PLAN_CHANGES, type PlanAnswer, type PlanChangeKind } from './plan-view.js';

export interface ApiContext {
  readonly model: AdminModel;
  readonly metrics: Metrics;
}

/** The event stream (Server-Sent Events) is no route's answer: http.ts serves it before the routes. */
export type ApiResponse =
  | { readonly status: number; readonly body: unknown }
  | { readonly status: number; readonly text: string; readonly contentType: string };

export interface Route {
  readonly method: 'GET' | 'POST';
  /** Named groups become params. */
  readonly pattern: RegExp;
  readonly auth: boolean;
  readonly handle: (
    params: Readonly<Record<string, string>>,
    ctx: ApiContext,
    query: URLSearchParams,
    body: unknown,
  ) => Promise<ApiResponse>;
}

function notFound(message: string): ApiResponse {
  return { status: 404, body: { error: 'not-found', message } };
}

function badRequest(message: string): ApiResponse {
  return { status: 400, body: { error: 'bad-request', message } };
}

const noService = (id: string | undefined) => notFound(`service ${id ?? '?'} is not configured`);

function commandResponse(r: CommandOutcome, service: number, engine: string): ApiResponse {
  if (r.ok) return { status: 200, body: { ok: true, service, engine, message: r.message } };
  return {
    status: r.status,
    body: { error: r.status === 404 ? 'not-found' : r.status === 400 ? 'bad-request' : 'conflict', message: r.message },
  };
}

function engineCommand(
  run: (ctx: ApiContext, id: number, ip: string, body: unknown) => Promise<CommandOutcome | ApiResponse>,
) {
  return async (
    p: Readonly<Record<string, string>>,
    ctx: ApiContext,
    _q: URLSearchParams,
    body: unknown,
  ): Promise<ApiResponse> => {
    const id = Number(p.id);
    const ip = p.ip ?? '';
    if (!isIpv4(ip)) return badRequest(`not an IPv4 address: ${ip}`);
    const r = await run(ctx, id, ip, body);
    return 'ok' in r ? commandResponse(r, id, ip) : r;
  };
}

export const routes: Route[] = [
  {
    method: 'GET',
    pattern: /^\/$/,
    auth: false,
    handle: async () => ({ status: 200, text: PAGE_HTML, contentType: 'text/html; charset=utf-8' }),
  },
  {
    method: 'GET',
    pattern: /^\/metrics$/,
    auth: false,
    handle: async (_p, ctx) => ({
      status: 200,
      text: await ctx.metrics.render(),
      contentType: ctx.metrics.contentType,
    }),
  },
  {
    method: 'GET',
    pattern: /^\/api\/v1\/status$/,
    auth: false,
    handle: async (_p, ctx) => ({ status: 200, body: await ctx.model.statusWithTraffic() }),
  },
  {
    method: 'GET',
    pattern: /^\/api\/v1\/services\/(?<id>\d+)\/buckets$/,
    auth: false,
    handle: async (p, ctx) => {
      const v = await ctx.model.buckets(Number(p.id));
      return v ? { status: 200, body: v } : noService(p.id);
    },
  },
  {
    method: 'GET',
    pattern: /^\/api\/v1\/services\/(?<id>\d+)\/load$/,
    auth: false,
    handle: async (p, ctx, q) => {
      const epoch = q.get('epoch');
      if (epoch === null) {
        // No epoch: the load so far in the current window (a peer's `wccpctl plan rebalance` sums it with its own).
        const v = await ctx.model.loadSoFar(Number(p.id));
        return v
          ? { status: 200, body: v }
          : {
              status: 404,
              body: { error: 'not-found', message: `service ${p.id} does not use load-aware assignment` },
            };
      }
      if (!/^\d{1,15}$/.test(epoch))
        return badRequest(`load needs ?epoch=<window end / window>, got ${JSON.stringify(epoch)}`);
      const v = ctx.model.loadEpoch(Number(p.id), Number(epoch));
      return v
        ? { status: 200, body: v }
        : {
            status: 404,
            body: { error: 'not-found', message: `service ${p.id} published no load for epoch ${epoch} (yet)` },
          };
    },
  },
  {
    method: 'GET',
    pattern: /^\/api\/v1\/services\/(?<id>\d+)\/engines$/,
    auth: false,
    handle: async (p, ctx) => {
      const v = await ctx.model.engines(Number(p.id));
      return v ? { status: 200, body: v } : noService(p.id);
    },
  },
  {
    method: 'GET',
    pattern: /^\/api\/v1\/services\/(?<id>\d+)\/which$/,
    auth: false,
    handle: async (p, ctx, q) => {
      const ip = q.get('ip') ?? '';
      if (!isIpAddress(ip)) return badRequest(`which needs ?ip=<IPv4 or IPv6 address>, got ${JSON.stringify(ip)}`);
      const v = ctx.model.which(Number(p.id), ip);
      return v ? { status: 200, body: v } : noService(p.id);
    },
  },
  {
    method: 'GET',
    pattern: /^\/api\/v1\/plan$/,
    auth: false,
    handle: async (_p, ctx, q) => plan(ctx, q),
  },
  {
    method: 'GET',
    pattern: /^\/api\/v1\/events$/,
    auth: false,
    handle: async (_p, ctx, q) => {
      const limit = Math.min(500, Math.max(0, Number(q.get('limit') ?? 100) || 0));
      return { status: 200, body: { events: ctx.model.recentEvents(limit) } };
    },
  },
  {
    method: 'POST',
    pattern: /^\/api\/v1\/services\/(?<id>\d+)\/engines\/(?<ip>[^/]+)\/drain$/,
    auth: true,
    handle: engineCommand((ctx, id, ip) => ctx.model.drain(id, ip)),
  },
  {
    method: 'POST',
    pattern: /^\/api\/v1\/services\/(?<id>\d+)\/engines\/(?<ip>[^/]+)\/undrain$/,
    auth: true,
    handle: engineCommand((ctx, id, ip) => ctx.model.undrain(id, ip)),
  },
  {
    method: 'POST',
    pattern: /^\/api\/v1\/services\/(?<id>\d+)\/engines\/(?<ip>[^/]+)\/weight$/,
    auth: true,
    handle: engineCommand(async (ctx, id, ip, body) => {
      const w = body && typeof body === 'object' && 'weight' in body ? (body as { weight: unknown }).weight : undefined;
      // null ends the admin's weight: the engine's own Assignment Weight (or its configured one) counts again.
      if (w !== null && (typeof w !== 'number' || !Number.isInteger(w) || w < 0 || w > 65535)) {
        return badRequest(
          `weight needs a JSON body {"weight": 0-65535}, or {"weight": null} to clear it, got ${JSON.stringify(w ?? 'nothing')}`,
        );
      }
      return ctx.model.setWeight(id, ip, w);
    }),
  },
];

/** GET /api/v1/plan?change=join|leave|drain|weight&engine=IP[&weight=W][&service=N]: changes nothing. */
async function plan(ctx: ApiContext, q: URLSearchParams): Promise<ApiResponse> {
  const change = q.get('change') ?? '';
  const serviceText = q.get('service');
  if (serviceText !== null && (!/^\d+$/.test(serviceText) || Number(serviceText) > 255))
    return badRequest(`service must be a service id 0-255, got ${JSON.stringify(serviceText)}`);
  const service = serviceText === null ? null : Number(serviceText);
  if (change === 'rebalance') {
    if (q.get('engine') !== null || q.get('weight') !== null)
      return badRequest('plan rebalance takes no engine or weight');
    return answer(await ctx.model.planRebalance(service));
  }
  if (!(PLAN_CHANGES as readonly string[]).includes(change))
    return badRequest(`plan needs ?change=${PLAN_CHANGES.join('|')}, got ${JSON.stringify(change)}`);
  const engine = q.get('engine') ?? '';
  if (!isIpv4(engine)) return badRequest(`plan needs ?engine=<IPv4 address>, got ${JSON.stringify(engine)}`);
  const weightText = q.get('weight');
  if (weightText !== null && (!/^\d+$/.test(weightText) || Number(weightText) > 65535))
    return badRequest(`weight must be an integer 0-65535, got ${JSON.stringify(weightText)}`);
  if (change === 'weight' && weightText === null) return badRequest('plan weight needs ?weight=0-65535');
  if (change !== 'join' && change !== 'weight' && weightText !== null)
    return badRequest(`plan ${change} takes no weight`);
  return answer(
    ctx.model.plan({
      change: change as PlanChangeKind,
      engine,
      weight: weightText === null ? null : Number(weightText),
      service,
    }),
  );
}

function answer(r: PlanAnswer): ApiResponse {
  if (r.ok) return { status: 200, body: r.view };
  const error = r.status === 404 ? 'not-found' : r.status === 409 ? 'conflict' : 'bad-request';
  return { status: r.status, body: { error, message: r.message } };
}

/** The SSE route is matched before the table: GET /api/v1/events with Accept: text/event-stream. */
export function wantsEventStream(method: string, path: string, accept: string | undefined): boolean {
  return method === 'GET' && path === '/api/v1/events' && (accept ?? '').includes('text/event-stream');
}

/** Finds the route for a request: the route and its params, 'method' when only the method is wrong, or null. */
export function matchRoute(
  method: string,
  path: string,
  table: readonly Route[] = routes,
): { route: Route; params: Record<string, string> } | 'method' | null {
  let pathMatched = false;
  for (const route of table) {
    const m = route.pattern.exec(path);
    if (!m) continue;
    pathMatched = true;
    if (route.method === method) return { route, params: { ...(m.groups ?? {}) } };
  }
  return pathMatched ? 'method' : null;
}
