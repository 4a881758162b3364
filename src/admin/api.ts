// The HTTP API's routes, as a table: method, path pattern, whether a bearer token is needed, handler. Handlers read
// cluster snapshots and send commands through the cluster's own entry points (the ones engine messages use).
import type { Cluster } from '../cluster/index.js';

export interface ApiContext {
  readonly cluster: Cluster;
  /** Extra figures for /status (router counters, data plane, uptime ...). */
  readonly status: () => Record<string, unknown>;
}

export interface ApiResponse {
  readonly status: number;
  readonly body: unknown;
}

export interface Route {
  readonly method: 'GET' | 'POST';
  /** Named groups become params. */
  readonly pattern: RegExp;
  readonly auth: boolean;
  readonly handle: (params: Readonly<Record<string, string>>, ctx: ApiContext, query: URLSearchParams) => ApiResponse;
}

function notFound(message: string): ApiResponse {
  return { status: 404, body: { error: 'not-found', message } };
}

function serviceParam(params: Readonly<Record<string, string>>, ctx: ApiContext) {
  const id = Number(params.id);
  return Number.isInteger(id) ? ctx.cluster.service(id) : null;
}

function command(run: (ctx: ApiContext, id: number, ip: string) => { ok: true } | { ok: false; error: string; message: string }) {
  return (params: Readonly<Record<string, string>>, ctx: ApiContext): ApiResponse => {
    const id = Number(params.id);
    const ip = params.ip ?? '';
    const r = run(ctx, id, ip);
    if (r.ok) return { status: 200, body: { ok: true, service: id, engine: ip } };
    return { status: r.error === 'bad-weight' ? 400 : 404, body: { error: r.error, message: r.message } };
  };
}

export const routes: Route[] = [
  {
    method: 'GET', pattern: /^\/api\/v1\/status$/, auth: false,
    handle: (_p, ctx) => {
      const snap = ctx.cluster.snapshot();
      return {
        status: 200,
        body: {
          routerAddress: snap.routerAddress,
          services: snap.services.map((s) => ({
            id: s.id, mode: s.mode, authority: s.authority, failMode: s.failMode, changeNumber: s.changeNumber,
            memberChangeNumber: s.memberChangeNumber, designatedEngine: s.designatedEngine,
            engines: s.engines.length, usable: s.engines.filter((e) => e.state === 'usable').length,
            assigned: s.buckets.filter((b) => b !== null).length, counters: s.counters,
          })),
          counters: snap.counters,
          ...ctx.status(),
        },
      };
    },
  },
  {
    method: 'GET', pattern: /^\/api\/v1\/services\/(?<id>\d+)\/buckets$/, auth: false,
    handle: (p, ctx) => {
      const s = serviceParam(p, ctx);
      return s ? { status: 200, body: { service: s.id, changeNumber: s.changeNumber, buckets: s.buckets } } : notFound(`service ${p.id} is not configured`);
    },
  },
  {
    method: 'GET', pattern: /^\/api\/v1\/services\/(?<id>\d+)\/engines$/, auth: false,
    handle: (p, ctx) => {
      const s = serviceParam(p, ctx);
      return s ? { status: 200, body: { service: s.id, changeNumber: s.changeNumber, engines: s.engines } } : notFound(`service ${p.id} is not configured`);
    },
  },
  {
    method: 'POST', pattern: /^\/api\/v1\/services\/(?<id>\d+)\/engines\/(?<ip>[0-9.]+)\/drain$/, auth: true,
    handle: command((ctx, id, ip) => ctx.cluster.drain(id, ip, 'admin drain (API)')),
  },
  {
    method: 'POST', pattern: /^\/api\/v1\/services\/(?<id>\d+)\/engines\/(?<ip>[0-9.]+)\/undrain$/, auth: true,
    handle: command((ctx, id, ip) => ctx.cluster.undrain(id, ip, 'admin undrain (API)')),
  },
];

/** Finds the route for a request: the route and its params, 'method' when only the method is wrong, or null. */
export function matchRoute(method: string, path: string, table: readonly Route[] = routes):
  { route: Route; params: Record<string, string> } | 'method' | null {
  let pathMatched = false;
  for (const route of table) {
    const m = route.pattern.exec(path);
    if (!m) continue;
    pathMatched = true;
    if (route.method === method) return { route, params: { ...(m.groups ?? {}) } };
  }
  return pathMatched ? 'method' : null;
}
