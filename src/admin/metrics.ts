// /metrics in the Prometheus text exposition format (prom-client). Values are read from the admin model at scrape
// time, so a scrape always agrees with the API; only the data-plane apply latency is observed as it happens.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { ENGINE_STATES } from '../cluster/index.js';
import type { AdminModel } from './model.js';
import type { IpFamilyCountersView, PeerServiceView } from './api-types.js';

export interface Metrics {
  readonly registry: Registry;
  readonly contentType: string;
  /** Records one data-plane apply (seconds), labelled by backend and outcome. */
  observeApply(backend: string, seconds: number, ok: boolean): void;
  render(): Promise<string>;
}

/** A counter's rows: labels and the running total, null where this data plane does not count it. */
type Rows = Array<[Record<string, string | number>, number | null]>;

/**
 * A counter read from the model at scrape time: prom-client Counters only go up, so each scrape resets it and
 * increments it to the running totals. A null is no sample rather than a made-up 0, also without labels, where
 * prom-client would print a 0 sample whatever happens.
 */
class CounterFrom extends Counter {
  constructor(
    config: { name: string; help: string; labelNames: string[]; registers: Registry[] },
    private readonly read: () => Rows | Promise<Rows>,
  ) {
    super(config);
  }

  override async get(): ReturnType<Counter['get']> {
    this.reset();
    const rows = await this.read();
    for (const [labels, value] of rows) if (value !== null && value > 0) this.inc(labels, value);
    const metric = await super.get();
    return rows.some(([, value]) => value !== null) ? metric : { ...metric, values: [] };
  }
}

export function createMetrics(model: AdminModel): Metrics {
  const registry = new Registry();
  const services = () => model.status().services;

  function counterFrom(name: string, help: string, labelNames: string[], read: () => Rows | Promise<Rows>) {
    return new CounterFrom({ name, help, labelNames, registers: [registry] }, read);
  }

  new Gauge({
    name: 'wccpd_build_info',
    help: 'Always 1; its labels are the running wccpd version (package.json) and the commit it was built from.',
    labelNames: ['version', 'commit'],
    registers: [registry],
    collect() {
      this.reset();
      const { version, commit } = model.status().build;
      this.set({ version, commit }, 1);
    },
  });
  // Named as Prometheus names its own (prometheus_config_last_reload_successful and _success_timestamp_seconds).
  new Gauge({
    name: 'wccpd_config_last_reload_successful',
    help: 'Whether the last reload (SIGHUP, systemctl reload) applied its config: 1, or 0 when it was refused (wccpd runs on the config before it); 1 before the first reload.',
    registers: [registry],
    collect() {
      this.set(model.status().config?.lastReload?.ok === false ? 0 : 1);
    },
  });
  new Gauge({
    name: 'wccpd_config_last_reload_success_timestamp_seconds',
    help: 'When the running config was read: the start, or the last reload that succeeded (Unix time).',
    registers: [registry],
    collect() {
      const c = model.status().config;
      if (c !== undefined) this.set(Date.parse(c.loadedAt) / 1000);
    },
  });
  counterFrom('wccpd_config_reloads_total', 'Reloads of the config, by result (success, failure).', ['result'], () => {
    const c = model.status().config;
    return c === undefined
      ? []
      : [
          [{ result: 'success' }, c.reloads - c.reloadFailures],
          [{ result: 'failure' }, c.reloadFailures],
        ];
  });
  new Gauge({
    name: 'wccpd_dataplane_bridge_netfilter',
    help:
      '1 when br_netfilter makes frames bridged on a client interface or an engine segment run the IP hooks ' +
      '(set net.bridge.bridge-nf-call-iptables=0; docs/operations.md), else 0.',
    registers: [registry],
    collect() {
      this.set(model.status().dataplane.bridgeNetfilter?.active === true ? 1 : 0);
    },
  });
  counterFrom(
    'wccpd_dataplane_restored_total',
    "Kernel objects of wccpd's that someone else removed and wccpd put back (a link that went down takes its routes " +
      "along; an ip rule flush the rules; a firewall reload's flush ruleset our nft tables), by kind.",
    ['kind'],
    () => {
      const r = model.status().dataplane.restored;
      if (r === undefined) return [];
      return [
        [{ kind: 'ip-rule' }, r.ipRules],
        [{ kind: 'ip-route' }, r.ipRoutes],
        [{ kind: 'ip-guard' }, r.ipGuard],
        [{ kind: 'nft-table' }, r.nftTables],
      ];
    },
  );
  counterFrom(
    'wccpd_dataplane_engines_moved_total',
    'Times an engine was found on another interface than its redirect (an ip route change, a renumbering) and its ' +
      'redirect moved there (nft and ingress backends).',
    [],
    () => {
      const moved = model.status().dataplane.restored?.enginesMoved;
      return moved === undefined ? [] : [[{}, moved]];
    },
  );
  counterFrom(
    'wccpd_dataplane_ipv6_no_neighbour_total',
    'Changes that found an engine of an IPv6 service with no IPv6 neighbour entry on its segment: its buckets IPv6 ' +
      'connections go direct (refused when the service fails closed) until it has one (nft backend).',
    [],
    () => {
      const n = model.status().dataplane.restored?.ipv6WithoutNeighbour;
      return n === undefined ? [] : [[{}, n]];
    },
  );
  counterFrom(
    'wccpd_dataplane_restore_failures_total',
    'Checks that found kernel objects of wccpd missing and could not put them back yet (a link still down).',
    [],
    () => {
      const r = model.status().dataplane.restored;
      return r === undefined ? [] : [[{}, r.failedChecks]];
    },
  );
  new Gauge({
    name: 'wccpd_engines',
    help: 'Engines per service and lifecycle state.',
    labelNames: ['service', 'state'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const s of services()) {
        const v = await model.engines(s.id);
        for (const state of ENGINE_STATES) {
          this.set({ service: s.id, state }, v ? v.engines.filter((e) => e.state === state).length : 0);
        }
      }
    },
  });
  new Gauge({
    name: 'wccpd_engine_buckets',
    help: 'Buckets assigned to each engine.',
    labelNames: ['service', 'engine'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const s of services()) {
        const v = await model.engines(s.id);
        for (const e of v?.engines ?? []) this.set({ service: s.id, engine: e.address }, e.buckets);
      }
    },
  });
  new Gauge({
    name: 'wccpd_service_bypass',
    help: '1 when the service has no usable engine (fail open: traffic goes direct).',
    labelNames: ['service'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of services()) this.set({ service: s.id }, s.state === 'bypass' ? 1 : 0);
    },
  });
  // The peer gateways (config peers), read from their APIs at scrape time (at most once a second, 2 s timeout): one
  // sample per peer and service, none where `value` says null.
  const peerGauge = (name: string, help: string, value: (s: PeerServiceView) => number | null): void => {
    new Gauge({
      name,
      help,
      labelNames: ['peer', 'service'],
      registers: [registry],
      async collect() {
        this.reset();
        for (const p of (await model.statusWithTraffic()).peers ?? []) {
          for (const s of p.services) {
            const v = value(s);
            if (v !== null) this.set({ peer: p.address, service: s.id }, v);
          }
        }
      },
    });
  };
  peerGauge(
    'wccpd_peer_differing_buckets',
    "Buckets whose engine differs between a peer gateway's table and ours (no sample when it could not be read).",
    (s) => s.differingBuckets,
  );
  peerGauge(
    'wccpd_peer_differing_mask_values',
    "A mask service's mask values whose mask, value or engine differs between a peer gateway and us.",
    (s) => s.differingMaskValues,
  );
  peerGauge('wccpd_peer_unread', "1 when a peer gateway's table of the service could not be read from its API.", (s) =>
    s.agrees === null ? 1 : 0,
  );
  new Gauge({
    name: 'wccpd_service_closed',
    help: '1 when the service has no usable engine and fails closed (traffic refused).',
    labelNames: ['service'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of services()) this.set({ service: s.id }, s.state === 'closed' ? 1 : 0);
    },
  });
  new Gauge({
    name: 'wccpd_change_number',
    help: 'The bucket table change number.',
    labelNames: ['service'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of services()) this.set({ service: s.id }, s.changeNumber);
    },
  });
  new Gauge({
    name: 'wccpd_buckets_moved',
    help:
      'Buckets in a move now: their engine changed within the last dataplane.flows.idle, and connections older than ' +
      'the move still go where the bucket went before (ingress backend; no sample where the data plane keeps no moves).',
    labelNames: ['service'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of services()) if (s.movedBuckets !== null) this.set({ service: s.id }, s.movedBuckets);
    },
  });
  new Gauge({
    name: 'wccpd_change_number_in_force',
    help: 'The change number of the table the data plane last applied without error (no sample before the first, or with backend none).',
    labelNames: ['service'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of services()) if (s.inForce !== null) this.set({ service: s.id }, s.inForce.changeNumber);
    },
  });

  const perEngine = async (pick: (e: { packets: number; bytes: number }) => number) => {
    const rows: Array<[Record<string, string | number>, number]> = [];
    for (const s of services()) {
      const v = await model.engines(s.id);
      for (const e of v?.engines ?? []) rows.push([{ service: s.id, engine: e.address }, pick(e)]);
    }
    return rows;
  };
  // Per-engine traffic counters need an async read; a Counter's collect may be async.
  new Counter({
    name: 'wccpd_redirected_packets_total',
    help: 'Packets redirected to each engine.',
    labelNames: ['service', 'engine'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const [labels, value] of await perEngine((e) => e.packets)) if (value > 0) this.inc(labels, value);
    },
  });
  new Counter({
    name: 'wccpd_redirected_bytes_total',
    help: 'Bytes redirected to each engine.',
    labelNames: ['service', 'engine'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const [labels, value] of await perEngine((e) => e.bytes)) if (value > 0) this.inc(labels, value);
    },
  });

  type CounterKey = Exclude<keyof ReturnType<typeof services>[number]['counters'], 'ipv6'>;
  const perService = (key: CounterKey) => (): Rows => services().map((s) => [{ service: s.id }, s.counters[key]]);
  const perServiceTraffic = (key: CounterKey) => async (): Promise<Rows> =>
    (await model.statusWithTraffic()).services.map((s) => [{ service: s.id }, s.counters[key]]);
  counterFrom(
    'wccpd_here_i_am_received_total',
    'Valid HERE_I_AMs received.',
    ['service'],
    perService('hereIAmReceived'),
  );
  counterFrom('wccpd_i_see_you_sent_total', 'I_SEE_YOUs sent.', ['service'], perService('iSeeYouSent'));
  counterFrom(
    'wccpd_removal_queries_sent_total',
    'REMOVAL_QUERYs sent.',
    ['service'],
    perService('removalQueriesSent'),
  );
  counterFrom(
    'wccpd_auth_failures_total',
    'Messages that failed MD5 authentication.',
    ['service'],
    perService('authFailures'),
  );
  counterFrom('wccpd_rebalances_total', 'Bucket table changes.', ['service'], perService('rebalances'));
  counterFrom(
    'wccpd_load_moves_total',
    'Buckets moved by load-aware assignment (docs/buckets.md).',
    ['service'],
    perService('loadMoves'),
  );
  new Gauge({
    name: 'wccpd_engine_load_ratio',
    help: "Each engine's load / its weighted fair share in the last load-aware window, after that window's moves.",
    labelNames: ['service', 'engine'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of services())
        for (const e of s.load?.engines ?? []) this.set({ service: s.id, engine: e.address }, e.ratio);
    },
  });
  counterFrom(
    'wccpd_table_changes_coalesced_total',
    'Table recomputations folded into a later change by timers.settle.',
    ['service'],
    perService('tableChangesCoalesced'),
  );
  counterFrom(
    'wccpd_packets_denied_total',
    'New connections refused (fail closed).',
    ['service'],
    perServiceTraffic('packetsDenied'),
  );
  counterFrom(
    'wccpd_packets_unassigned_total',
    'New connections whose bucket had no engine (forwarded normally).',
    ['service'],
    perServiceTraffic('packetsUnassigned'),
  );
  const perServiceIpv6 = (key: keyof IpFamilyCountersView) => async (): Promise<Rows> =>
    (await model.statusWithTraffic()).services.map((s) => [{ service: s.id }, s.counters.ipv6?.[key] ?? null]);
  counterFrom(
    'wccpd_ipv6_redirected_packets_total',
    'IPv6 packets redirected, of a service that redirects IPv6 (part of wccpd_redirected_packets_total).',
    ['service'],
    perServiceIpv6('packetsRedirected'),
  );
  counterFrom(
    'wccpd_ipv6_redirected_bytes_total',
    'IPv6 bytes redirected (part of wccpd_redirected_bytes_total).',
    ['service'],
    perServiceIpv6('bytesRedirected'),
  );
  counterFrom(
    'wccpd_ipv6_packets_denied_total',
    'New IPv6 connections refused (part of wccpd_packets_denied_total).',
    ['service'],
    perServiceIpv6('packetsDenied'),
  );
  counterFrom(
    'wccpd_ipv6_packets_unassigned_total',
    'New IPv6 connections forwarded normally (part of wccpd_packets_unassigned_total).',
    ['service'],
    perServiceIpv6('packetsUnassigned'),
  );
  counterFrom(
    'wccpd_packets_flows_full_total',
    "Packets the ingress data plane's full flow map could not record: new flows (redirected by the table, not " +
      'sticky) and TCP FIN/RST whose closing entry found it full (steered by their old entry once).',
    ['service'],
    perServiceTraffic('packetsFlowsFull'),
  );
  counterFrom('wccpd_decode_errors_total', 'Datagrams that failed to decode, by reason.', ['reason'], () =>
    Object.entries(model.status().decodeErrors).map(([reason, n]) => [{ reason }, n]),
  );
  counterFrom('wccpd_datagrams_dropped_total', 'Datagrams dropped before the cluster, by reason.', ['reason'], () =>
    Object.entries(model.status().dropped).map(([reason, n]) => [{ reason }, n]),
  );
  counterFrom(
    'wccpd_wccp_socket_drops_total',
    "WCCP datagrams the kernel dropped on the router's socket, its receive buffer full (/proc/net/udp); wccpd never " +
      'saw them. No sample where they cannot be read (docs/operations.md).',
    [],
    () => [[{}, model.status().wccpSocket?.kernelDrops ?? null]],
  );
  counterFrom(
    'wccpd_internal_errors_total',
    "Errors a boundary caught and wccpd ran on after, by where: cluster-tick (the timers' tick threw; retried with a " +
      'backoff), state-save (the state file could not be gathered or written). Each is logged (docs/operations.md).',
    ['where'],
    () => Object.entries(model.status().internalErrors ?? {}).map(([where, n]): Rows[number] => [{ where }, n]),
  );

  const admin = () => model.status().admin;
  new Gauge({
    name: 'wccpd_admin_event_clients',
    help: 'Event-stream (SSE) clients connected now.',
    registers: [registry],
    collect() {
      this.set(admin().eventClients);
    },
  });
  counterFrom(
    'wccpd_admin_event_clients_refused_total',
    'Event-stream requests refused (503) at the admin.eventClients cap.',
    [],
    () => [[{}, admin().eventClientsRefused]],
  );
  counterFrom(
    'wccpd_admin_event_clients_dropped_total',
    'Event-stream clients dropped because they did not read.',
    [],
    () => [[{}, admin().eventClientsDropped]],
  );
  counterFrom(
    'wccpd_admin_host_refused_total',
    'Admin requests refused (421) for a Host header naming another server.',
    [],
    () => [[{}, admin().hostRefused]],
  );
  counterFrom(
    'wccpd_admin_connections_refused_total',
    'Admin connections closed at once because admin.eventClients + 128 were open.',
    [],
    () => [[{}, admin().connectionsRefused]],
  );
  counterFrom(
    'wccpd_admin_bad_requests_total',
    "Admin requests refused as malformed (400, 408, 431: node's parser or ours).",
    [],
    () => [[{}, admin().badRequests]],
  );
  counterFrom(
    'wccpd_admin_unauthorized_total',
    'Admin changes refused 401 for a missing or wrong bearer token.',
    [],
    () => [[{}, admin().unauthorized]],
  );
  counterFrom(
    'wccpd_admin_internal_errors_total',
    'Admin requests answered 500 because their handling threw (a bug; logged).',
    [],
    () => [[{}, admin().internalErrors]],
  );
  const warmups = async () => {
    const rows: {
      labels: Record<string, string | number>;
      w: NonNullable<Awaited<ReturnType<AdminModel['engines']>>>['engines'][number]['warmup'];
    }[] = [];
    for (const s of services()) {
      for (const e of (await model.engines(s.id))?.engines ?? [])
        if (e.warmup) rows.push({ labels: { service: s.id, engine: e.address }, w: e.warmup });
    }
    return rows;
  };
  new Gauge({
    name: 'wccpd_engine_warming',
    help: '1 while the engine warms up (the broker asks warm sources for its misses).',
    labelNames: ['service', 'engine'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const { labels, w } of await warmups()) this.set(labels, w?.warming ? 1 : 0);
    },
  });
  new Gauge({
    name: 'wccpd_engine_warmup_seconds_left',
    help: "Seconds until the warm-up duration ends the engine's warm-up.",
    labelNames: ['service', 'engine'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const { labels, w } of await warmups()) this.set(labels, (w?.timeLeftMs ?? 0) / 1000);
    },
  });
  counterFrom(
    'wccpd_engine_warmup_queries_total',
    "ICP queries the broker asked a warm source about, in the engine's latest warm-up.",
    ['service', 'engine'],
    async () => (await warmups()).map(({ labels, w }) => [labels, w?.queries ?? 0]),
  );
  counterFrom(
    'wccpd_engine_warmup_peer_hits_total',
    'Of those, the ones a source answered HIT.',
    ['service', 'engine'],
    async () => (await warmups()).map(({ labels, w }) => [labels, w?.peerHits ?? 0]),
  );
  counterFrom(
    'wccpd_warmup_broker_total',
    "The warm-up broker's ICP and HTTP counters, by kind (docs/warmup.md).",
    ['kind'],
    () => Object.entries(model.status().warmup ?? {}).map(([kind, n]) => [{ kind }, n]),
  );

  // The userland data plane's own counters (docs/userland.md); no sample with another backend.
  const userland = () => model.status().dataplane.userland;
  counterFrom(
    'wccpd_userland_packets_total',
    "The userland data plane's packet counters, by kind: bypassed, sendErrors, " +
      'checksumsCompleted, segmented (super-frames cut to the MTU), segments (what they became), othersPassedOn, ' +
      'capturesReopened (pcap sessions reopened after their link went down and came back).',
    ['kind'],
    () => {
      const u = userland();
      if (u === undefined) return [];
      const { bypassed, sendErrors, checksumsCompleted, segmented, segments, othersPassedOn, capturesReopened } = u;
      return Object.entries({
        bypassed,
        sendErrors,
        checksumsCompleted,
        segmented,
        segments,
        othersPassedOn,
        capturesReopened,
      }).map(([kind, n]) => [{ kind }, n]);
    },
  );
  counterFrom(
    'wccpd_userland_oversize_dropped_total',
    'Packets larger than the egress MTU the userland data plane could not ' + 'segment and dropped, by reason.',
    ['reason'],
    () => Object.entries(userland()?.oversizeDropped ?? {}).map(([reason, n]) => [{ reason }, n]),
  );
  new Gauge({
    name: 'wccpd_userland_flows',
    help: "Live flows in the userland data plane's flow table.",
    labelNames: ['service'],
    registers: [registry],
    collect() {
      this.reset();
      for (const f of userland()?.flows ?? []) this.set({ service: f.service }, f.flows);
    },
  });

  const apply = new Histogram({
    name: 'wccpd_dataplane_apply_seconds',
    help: 'Time to apply a bucket table to the data plane.',
    labelNames: ['backend', 'outcome'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });

  return {
    registry,
    contentType: registry.contentType,
    observeApply(backend, seconds, ok) {
      apply.observe({ backend, outcome: ok ? 'ok' : 'error' }, seconds);
    },
    render: () => registry.metrics(),
  };
}
