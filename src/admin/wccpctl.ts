// wccpctl's commands over the HTTP API. Exit codes: 0 ok, 1 refused or bad input, 2 daemon unreachable.
import { isIpAddress, isIpv4 } from '../address.js';
import type { CommandLine } from './cli-args.js';
import type { BucketsView, EnginesView, EventView, PlanView, StatusView, WhichView } from './api-types.js';
import { ApiError, createClient, Unreachable, type ApiClient } from './client.js';
import { renderBuckets, renderEngines, renderEvent, renderPlan, renderStatus, renderWhich } from './render.js';

export interface CtlIo {
  readonly out: (s: string) => void;
  readonly err: (s: string) => void;
  /** Colour only on a terminal (and not with NO_COLOR). */
  readonly colour: boolean;
  /** Aborts `events --follow` (SIGINT in the CLI). */
  readonly signal?: AbortSignal;
}

export const API_USAGE = `  status                         routers, services, counters (like Cisco's show ip wccp)
  engines [--service N]          engines with state, flags, weight, buckets
  buckets [--service N] [--hex]  the 16 x 16 bucket grid (* a bucket in a move) and each engine's allotment
  which IP [--service N]         the bucket and engine a new connection to IP (IPv4 or IPv6) goes to, and why
  drain IP [--service N]         move the engine's buckets to the others (needs the token)
  undrain IP [--service N]       give the engine its share again (needs the token)
  weight IP W [--service N]      set the engine's weight 0-65535; W = clear: its own weight again (needs the token)
  plan join IP [--weight W]      what a change would do, changing nothing: the buckets that move, from which
  plan leave IP                  engine to which, each engine's share after; in every service it concerns, or
  plan drain IP                  --service N (--json: the table after as 256 entries, and the moves)
  plan weight IP W
  plan rebalance                 the load-aware moves the current window's end would make, with each
                                 engine's load / fair share now -> after (services with loadAware; with
                                 peers in mode consistent, on every gateway's load so far, summed)
  events [--follow]              recent events; --follow streams them live
URL defaults to http://127.0.0.1:8080 (env WCCPD_URL); the token comes from --token or env WCCPD_TOKEN.
Exit 0 ok, 1 refused or bad input, 2 when the daemon cannot be reached.`;

export const API_COMMANDS = [
  'status',
  'engines',
  'buckets',
  'which',
  'drain',
  'undrain',
  'weight',
  'plan',
  'events',
] as const;

/** Runs one API command (status, engines, ...) and returns the exit code. */
export async function runApiCommand(parsed: CommandLine, io: CtlIo): Promise<number> {
  const { command, global } = parsed;
  const rest = parsed.args;
  const api = createClient(global.url, global.token);
  const svc = parsed.service;
  const print = (value: unknown, human: () => string) => io.out(global.json ? JSON.stringify(value, null, 2) : human());
  const needIp = (): string | null => {
    const ip = rest[0];
    if (!ip || !isIpv4(ip)) {
      io.err(`wccpctl ${command}: expected an engine IPv4 address, got ${ip ?? 'nothing'}`);
      return null;
    }
    return ip;
  };
  try {
    switch (command) {
      case 'status': {
        const s = await api.get<StatusView>('status');
        print(s, () => renderStatus(s));
        return 0;
      }
      case 'engines': {
        const v = await api.get<EnginesView>(`services/${svc}/engines`);
        print(v, () => renderEngines(v));
        return 0;
      }
      case 'buckets': {
        const [t, e] = await Promise.all([
          api.get<BucketsView>(`services/${svc}/buckets`),
          api.get<EnginesView>(`services/${svc}/engines`),
        ]);
        print(t, () => renderBuckets(t, e.engines, { colour: io.colour, hex: parsed.hex }));
        return 0;
      }
      case 'which': {
        const ip = rest[0];
        if (!ip || !isIpAddress(ip)) {
          io.err(`wccpctl which: expected an IPv4 or IPv6 address, got ${ip ?? 'nothing'}`);
          return 1;
        }
        const w = await api.get<WhichView>(`services/${svc}/which?ip=${encodeURIComponent(ip)}`);
        print(w, () => renderWhich(w));
        return 0;
      }
      case 'drain':
      case 'undrain': {
        const ip = needIp();
        if (!ip) return 1;
        const r = await api.post<{ ok: boolean; message?: string }>(`services/${svc}/engines/${ip}/${command}`);
        print(
          r,
          () =>
            `${command === 'drain' ? 'drained' : 'undrained'} ${ip} in service ${svc}${r.message ? `: ${r.message}` : ''}`,
        );
        return 0;
      }
      case 'weight': {
        const ip = needIp();
        if (!ip) return 1;
        const clear = rest[1] === 'clear';
        const w = clear ? null : Number(rest[1]);
        if (!clear && (!/^\d+$/.test(rest[1] ?? '') || (w ?? 0) > 65535)) {
          io.err(`wccpctl weight: expected a weight 0-65535 or "clear", got ${rest[1] ?? 'nothing'}`);
          return 1;
        }
        const r = await api.post<{ ok: boolean; message?: string }>(`services/${svc}/engines/${ip}/weight`, {
          weight: w,
        });
        const done = clear ? 'admin weight cleared' : `set to ${w}`;
        print(r, () => `weight of ${ip} in service ${svc} ${done}${r.message ? `: ${r.message}` : ''}`);
        return 0;
      }
      case 'plan': {
        const query = planQuery(parsed);
        if (typeof query !== 'string') {
          io.err(`wccpctl plan: ${query.error}`);
          return 1;
        }
        const v = await api.get<PlanView>(`plan?${query}`);
        print(v, () => renderPlan(v));
        return 0;
      }
      case 'events': {
        const r = await api.get<{ events: EventView[] }>('events?limit=50');
        for (const e of r.events) io.out(global.json ? JSON.stringify(e) : renderEvent(e));
        if (parsed.follow) await follow(api, global.json, io);
        return 0;
      }
      default:
        io.err(`wccpctl: unknown command ${command}`);
        return 1;
    }
  } catch (err) {
    if (err instanceof Unreachable) {
      io.err(`wccpctl: ${err.message}`);
      return 2;
    }
    if (err instanceof ApiError) {
      const hint = err.status === 401 ? ' (this command needs the admin token: --token or WCCPD_TOKEN)' : '';
      io.err(`wccpctl ${command}: ${err.message}${hint}`);
      return 1;
    }
    throw err;
  }
}

const PLAN_VERBS = 'join IP [--weight W], leave IP, drain IP, weight IP W or rebalance';

/** `plan VERB IP [W]` as the API's query, or what is wrong with it. */
function planQuery(parsed: CommandLine): string | { error: string } {
  const [verb, ip, weight, ...extra] = parsed.args;
  const q = new URLSearchParams();
  if (verb === 'rebalance') {
    if (ip !== undefined) return { error: `rebalance takes no engine, got ${ip}` };
    if (parsed.weight !== undefined) return { error: 'rebalance takes no --weight' };
    q.set('change', verb);
    if (parsed.serviceGiven !== null) q.set('service', String(parsed.serviceGiven));
    return q.toString();
  }
  if (verb !== 'join' && verb !== 'leave' && verb !== 'drain' && verb !== 'weight')
    return { error: `expected ${PLAN_VERBS}, got ${verb ?? 'nothing'}` };
  if (ip === undefined || !isIpv4(ip))
    return { error: `${verb}: expected an engine IPv4 address, got ${ip ?? 'nothing'}` };
  const w = verb === 'weight' ? weight : parsed.weight;
  if (verb === 'weight' && w === undefined) return { error: 'weight: expected IP and a weight 0-65535' };
  if (parsed.weight !== undefined && verb !== 'join') return { error: `${verb}: --weight is for join (weight IP W)` };
  if (extra.length > 0 || (verb !== 'weight' && weight !== undefined))
    return {
      error: `${verb}: unexpected ${[...(verb !== 'weight' && weight !== undefined ? [weight] : []), ...extra].join(' ')}`,
    };
  if (w !== undefined && (!/^\d+$/.test(w) || Number(w) > 65535))
    return { error: `${verb}: expected a weight 0-65535, got ${w}` };
  q.set('change', verb);
  q.set('engine', ip);
  if (w !== undefined) q.set('weight', w);
  if (parsed.serviceGiven !== null) q.set('service', String(parsed.serviceGiven));
  return q.toString();
}

async function follow(api: ApiClient, json: boolean, io: CtlIo): Promise<void> {
  await api.stream(
    'events',
    (data) => {
      try {
        const e = JSON.parse(data) as EventView;
        io.out(json ? JSON.stringify(e) : renderEvent(e));
      } catch {
        // keep-alive comments carry no JSON
      }
    },
    io.signal,
  );
}
