// wccpctl's commands over the HTTP API. Exit codes: 0 ok, 1 refused or bad input, 2 daemon unreachable.
import type { BucketsView, EnginesView, EventView, StatusView, WhichView } from './api-types.js';
import { ApiError, createClient, Unreachable, type ApiClient } from './client.js';
import { renderBuckets, renderEngines, renderEvent, renderStatus, renderWhich } from './render.js';

export interface CtlIo {
  readonly out: (s: string) => void;
  readonly err: (s: string) => void;
  readonly isTTY: boolean;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Aborts `events --follow` (SIGINT in the CLI). */
  readonly signal?: AbortSignal;
}

export const USAGE = `usage: wccpctl [--url URL] [--token T] [--json] COMMAND
  status                      routers, services, counters (like Cisco's show ip wccp)
  engines [--service N]       engines with state, flags, weight, buckets
  buckets [--service N] [--hex]  the 16 x 16 bucket grid and each engine's allotment
  which IP [--service N]      the bucket and engine a new connection to IP goes to, and why
  drain IP [--service N]      move the engine's buckets to the others (needs the token)
  undrain IP [--service N]
  weight IP N [--service N]   set the engine's weight (needs the token)
  events [--follow]           recent events; --follow streams them live
  decode [--json] [--icp|--gre] [FILE|-]  decode one datagram (hex or raw)
URL defaults to http://127.0.0.1:8080 (env WCCPD_URL); the token comes from --token or env WCCPD_TOKEN.`;

interface Parsed {
  url: string;
  token: string | undefined;
  json: boolean;
  service: number;
  hex: boolean;
  follow: boolean;
  args: string[];
}

function parse(argv: readonly string[], env: CtlIo['env']): Parsed | string {
  const p: Parsed = {
    url: env.WCCPD_URL ?? 'http://127.0.0.1:8080', token: env.WCCPD_TOKEN, json: false, service: 0,
    hex: false, follow: false, args: [],
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    try {
      if (a === '--url') p.url = value();
      else if (a === '--token') p.token = value();
      else if (a === '--json') p.json = true;
      else if (a === '--hex') p.hex = true;
      else if (a === '--follow' || a === '-f') p.follow = true;
      else if (a === '--service') {
        const v = value();
        p.service = Number(v);
        if (!/^\d+$/.test(v) || p.service > 255) return `--service: not a service id (0-255): ${v}`;
      } else if (a.startsWith('--')) return `unknown option ${a}`;
      else p.args.push(a);
    } catch (e) {
      return (e as Error).message;
    }
  }
  return p;
}

const IPV4 = /^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/;

export async function runWccpctl(argv: readonly string[], io: CtlIo): Promise<number> {
  const parsed = parse(argv, io.env);
  if (typeof parsed === 'string') {
    io.err(`wccpctl: ${parsed}\n${USAGE}`);
    return 1;
  }
  const [command, ...rest] = parsed.args;
  if (!command || command === 'help') {
    io.out(USAGE);
    return command ? 0 : 1;
  }
  const api = createClient(parsed.url, parsed.token);
  const svc = parsed.service;
  const print = (value: unknown, human: () => string) => io.out(parsed.json ? JSON.stringify(value, null, 2) : human());
  const needIp = (): string | null => {
    const ip = rest[0];
    if (!ip || !IPV4.test(ip)) {
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
          api.get<BucketsView>(`services/${svc}/buckets`), api.get<EnginesView>(`services/${svc}/engines`),
        ]);
        print(t, () => renderBuckets(t, e.engines, { colour: io.isTTY && !io.env.NO_COLOR, hex: parsed.hex }));
        return 0;
      }
      case 'which': {
        const ip = rest[0];
        if (!ip || !IPV4.test(ip)) {
          io.err(`wccpctl which: expected an IPv4 address, got ${ip ?? 'nothing'}`);
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
        print(r, () => `${command === 'drain' ? 'drained' : 'undrained'} ${ip} in service ${svc}${r.message ? `: ${r.message}` : ''}`);
        return 0;
      }
      case 'weight': {
        const ip = needIp();
        if (!ip) return 1;
        const w = Number(rest[1]);
        if (!/^\d+$/.test(rest[1] ?? '') || w > 65535) {
          io.err(`wccpctl weight: expected a weight 0-65535, got ${rest[1] ?? 'nothing'}`);
          return 1;
        }
        const r = await api.post<{ ok: boolean; message?: string }>(`services/${svc}/engines/${ip}/weight`, { weight: w });
        print(r, () => `weight of ${ip} in service ${svc} set to ${w}${r.message ? `: ${r.message}` : ''}`);
        return 0;
      }
      case 'events': {
        const r = await api.get<{ events: EventView[] }>('events?limit=50');
        for (const e of r.events) io.out(parsed.json ? JSON.stringify(e) : renderEvent(e));
        if (parsed.follow) await follow(api, parsed.json, io);
        return 0;
      }
      default:
        io.err(`wccpctl: unknown command ${command}\n${USAGE}`);
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

async function follow(api: ApiClient, json: boolean, io: CtlIo): Promise<void> {
  await api.stream('events', (data) => {
    try {
      const e = JSON.parse(data) as EventView;
      io.out(json ? JSON.stringify(e) : renderEvent(e));
    } catch {
      // keep-alive comments carry no JSON
    }
  }, io.signal);
}
