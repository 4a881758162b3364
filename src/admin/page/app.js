// @ts-check
// The live page's script (docs/api.md, "The web page"), served as it is here, inline in the page that
// src/admin/page.ts builds. Checked by tsc (tsconfig.page.json: DOM types, and the API's own response types from
// api-types.ts, so a renamed API field fails the typecheck) and by eslint. Its settings come from the page's
// `page-config` JSON element, written by page.ts from the constants the tests also read.

/** @typedef {import('../api-types.js').StatusView} StatusView */
/** @typedef {import('../api-types.js').BucketsView} BucketsView */
/** @typedef {import('../api-types.js').EnginesView} EnginesView */
/** @typedef {import('../api-types.js').EngineView} EngineView */
/** @typedef {import('../api-types.js').EventView} EventView */
/** @typedef {import('../api-types.js').MovedBucketView} MovedBucketView */
/** @typedef {import('../api-types.js').WarmingBucketView} WarmingBucketView */
/** @typedef {import('../api-types.js').ServiceCountersView} ServiceCountersView */
/** @typedef {import('./config.js').PageConfig} PageConfig */
/** @typedef {'redirected' | 'denied' | 'unassigned'} ServiceCounter */
/**
 * A sample of the data plane's counters. `owners`: the 256 buckets' engines (null: none); `conns`: each bucket's new
 * connections since start, or null when the data plane does not count them; `packets`: engine -> packets.
 * @typedef {{ t: number, backend: string, owners: (string | null)[], conns: number[] | null,
 *   packets: Map<string, number>, service: Record<ServiceCounter, number | null> }} Sample
 */

/** @type {PageConfig} */
const CONFIG = JSON.parse(element('page-config').textContent || '{}');
const { colours: COLOURS, unassigned: UNASSIGNED, sampleMs: SAMPLE_MS, chartWindowMs: CHART_WINDOW_MS } = CONFIG;
const { shadeWindowMs: SHADE_WINDOW_MS, shadeMin: SHADE_MIN } = CONFIG;
const SVG = 'http://www.w3.org/2000/svg';
const params = new URLSearchParams(location.search);
let service = Number(params.get('service') || 0);

/** The page's element with this id; the page's HTML has every id the script asks for. */
function element(/** @type {string} */ id) {
  const el = document.getElementById(id);
  if (!el) throw new Error('page element #' + id + ' is missing');
  return el;
}
const $ = element;
const grid = $('grid');
/** @type {HTMLDivElement[]} */
const cells = [];
for (let i = 0; i < 256; i++) {
  const c = document.createElement('div');
  c.className = 'cell';
  c.dataset.bucket = String(i);
  c.textContent = i.toString(16).padStart(2, '0');
  grid.appendChild(c);
  cells.push(c);
}
/** An engine's colour: its place in the API's list (sorted by address), the same order wccpctl uses. */
function colourOf(/** @type {readonly EngineView[]} */ engines, /** @type {string | null} */ ip) {
  if (ip === null) return UNASSIGNED;
  const i = engines.findIndex((e) => e.address === ip);
  return i < 0 ? UNASSIGNED : COLOURS[i % COLOURS.length];
}
/**
 * @param {string} path
 * @returns {Promise<any>} the API's JSON; each caller names the view type it reads
 */
async function getJson(path) {
  const r = await fetch('/api/v1/' + path, { cache: 'no-store' });
  if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
  return r.json();
}
/**
 * @param {string} tag
 * @param {string} value
 * @param {string} [cls]
 */
function text(tag, value, cls) {
  const el = document.createElement(tag);
  el.textContent = value;
  if (cls) el.className = cls;
  return el;
}
function fmt(/** @type {number | null | undefined} */ n) {
  if (n === null || n === undefined) return '-';
  if (n >= 1e9) return (n / 1e9).toFixed(2) + ' G';
  if (n >= 1e6) return (n / 1e6).toFixed(2) + ' M';
  if (n >= 1e4) return (n / 1e3).toFixed(1) + ' k';
  return String(Math.round(n * 10) / 10);
}

// Samples of the data plane's counters, bounded by the chart's window.
/** @type {Sample[]} */
let samples = [];
function addSample(/** @type {Sample} */ s) {
  const last = samples[samples.length - 1];
  const before = last?.conns;
  // A counter that went down means the daemon restarted: the older samples no longer compare.
  if (before && s.conns && s.conns.some((n, i) => n < (before[i] ?? 0))) samples = [];
  samples.push(s);
  while (samples.length > 1 && samples[0].t < s.t - CHART_WINDOW_MS - SAMPLE_MS) samples.shift();
}
/**
 * New connections per second per engine (and 'direct' for buckets without one) between two samples.
 * @param {Sample} a
 * @param {Sample} b
 */
function connRates(a, b) {
  /** @type {Map<string, number>} */
  const out = new Map();
  if (!a.conns || !b.conns) return out;
  const dt = (b.t - a.t) / 1000;
  for (let i = 0; i < 256; i++) {
    const d = b.conns[i] - a.conns[i];
    if (d <= 0) continue;
    const who = b.owners[i] ?? 'direct';
    out.set(who, (out.get(who) || 0) + d / dt);
  }
  return out;
}
/**
 * @param {Sample} a
 * @param {Sample} b
 * @param {string} ip
 */
function packetRate(a, b, ip) {
  const pa = a.packets.get(ip);
  const pb = b.packets.get(ip);
  if (pa === undefined || pb === undefined || pb < pa) return null;
  return (pb - pa) / ((b.t - a.t) / 1000);
}

function drawChart(/** @type {readonly EngineView[]} */ engines) {
  const svg = $('chart');
  const W = 640,
    H = 200,
    L = 44,
    R = 8,
    T = 8,
    B = 22;
  svg.replaceChildren();
  svg.dataset.samples = String(samples.length);
  const latest = samples[samples.length - 1];
  if (!latest || !latest.conns) {
    $('chart-note').textContent = latest
      ? 'this data plane does not count connections (backend ' + latest.backend + ')'
      : '';
    return;
  }
  /** @type {Map<string, { t: number, v: number }[]>} */
  const series = new Map();
  /** @type {Map<string, number>} */
  const totals = new Map();
  for (let k = 1; k < samples.length; k++) {
    const rates = connRates(samples[k - 1], samples[k]);
    const dt = (samples[k].t - samples[k - 1].t) / 1000;
    for (const who of rates.keys()) if (!series.has(who)) series.set(who, []);
    for (const [who, pts] of series) {
      const v = rates.get(who) || 0;
      pts.push({ t: samples[k].t, v });
      totals.set(who, (totals.get(who) || 0) + v * dt);
    }
  }
  for (const e of engines) if (!series.has(e.address)) series.set(e.address, []);
  // The time axis grows with the page's samples from one minute up to the whole window.
  const span = Math.min(CHART_WINDOW_MS, Math.max(60000, latest.t - samples[0].t));
  const tick = span <= 120000 ? 15000 : 60000;
  let max = 0;
  for (const pts of series.values()) for (const p of pts) max = Math.max(max, p.v);
  const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
  const step = steps.find((s) => s * 4 >= max) || Math.ceil(max / 4);
  const top = step * 4;
  const x = (/** @type {number} */ t) => L + (W - L - R) * (1 - (latest.t - t) / span);
  const y = (/** @type {number} */ v) => T + (H - T - B) * (1 - v / top);
  /** @type {(x1: number, y1: number, x2: number, y2: number, cls: string) => void} */
  const line = (x1, y1, x2, y2, cls) => {
    const l = document.createElementNS(SVG, 'line');
    l.setAttribute('x1', String(x1));
    l.setAttribute('y1', String(y1));
    l.setAttribute('x2', String(x2));
    l.setAttribute('y2', String(y2));
    l.setAttribute('class', cls);
    svg.appendChild(l);
  };
  /** @type {(tx: number, ty: number, s: string, anchor: string) => void} */
  const label = (tx, ty, s, anchor) => {
    const el = document.createElementNS(SVG, 'text');
    el.setAttribute('x', String(tx));
    el.setAttribute('y', String(ty));
    el.setAttribute('text-anchor', anchor);
    el.setAttribute('class', 'axis');
    el.textContent = s;
    svg.appendChild(el);
  };
  for (let k = 0; k <= 4; k++) {
    line(L, y(step * k), W - R, y(step * k), 'grid');
    label(L - 4, y(step * k) + 4, fmt(step * k), 'end');
  }
  for (let m = 0; m * tick <= span; m++) {
    const ago = m * tick;
    const when = m === 0 ? 'now' : ago % 60000 === 0 ? '-' + ago / 60000 + ' min' : '-' + ago / 1000 + ' s';
    label(x(latest.t - ago), H - 6, when, m === 0 ? 'end' : 'middle');
  }
  const legend = $('legend');
  legend.replaceChildren();
  let n = 0;
  for (const [who, pts] of series) {
    const colour = who === 'direct' ? '#999' : colourOf(engines, who);
    // Engines with equal shares draw equal lines: each later line is thinner, so the ones below still show.
    const width = Math.max(1.2, 4 - 0.9 * n++);
    const last = pts.length ? pts[pts.length - 1].v : 0;
    const pl = document.createElementNS(SVG, 'polyline');
    const shown = pts.filter((p) => p.t >= latest.t - span);
    pl.setAttribute('points', shown.map((p) => x(p.t).toFixed(1) + ',' + y(p.v).toFixed(1)).join(' '));
    pl.setAttribute('stroke', colour);
    pl.setAttribute('stroke-width', String(width));
    pl.setAttribute('class', who === 'direct' ? 'series direct' : 'series');
    pl.dataset.engine = who;
    pl.dataset.last = last.toFixed(2);
    pl.dataset.total = String(Math.round(totals.get(who) || 0));
    svg.appendChild(pl);
    const item = text('span', '', 'item');
    const dot = text('span', '', 'swatch');
    dot.style.background = colour;
    item.append(dot, text('span', ' ' + (who === 'direct' ? 'direct (no engine)' : who) + ' ' + fmt(last) + '/s'));
    legend.appendChild(item);
  }
  $('chart-note').textContent = samples.length < 2 ? 'collecting: one sample every ' + SAMPLE_MS / 1000 + ' s' : '';
}

/** Each bucket's cell shaded by its new connections over the last SHADE_WINDOW_MS (the busiest fully opaque). */
function shade() {
  const latest = samples[samples.length - 1];
  const now = latest?.conns;
  if (!latest || !now) {
    cells.forEach((c) => {
      c.style.opacity = '1';
      delete c.dataset.connections;
    });
    $('shade-note').textContent = '';
    return;
  }
  let base = latest;
  for (const s of samples)
    if (s.t >= latest.t - SHADE_WINDOW_MS - SAMPLE_MS / 2 && s.conns) {
      base = s;
      break;
    }
  const then = base.conns ?? now;
  const n = now.map((v, i) => Math.max(0, v - (then[i] ?? 0)));
  const max = Math.max(0, ...n);
  cells.forEach((c, i) => {
    c.dataset.connections = String(n[i]);
    c.style.opacity = String(max <= 0 ? 1 : SHADE_MIN + (1 - SHADE_MIN) * (n[i] / max));
  });
  const span = Math.round((latest.t - base.t) / 1000);
  $('shade-note').textContent = 'shade: new connections per bucket in the last ' + span + ' s (darkest: ' + max + ')';
  grid.dataset.shadeMax = String(max);
}

/**
 * @param {string} id
 * @param {number | null | undefined} value
 * @param {number | null} rate
 * @param {number | null} [ipv6] the IPv6 part of `value`, for a service that redirects IPv6
 */
function counterCell(id, value, rate, ipv6 = null) {
  // A service that redirects IPv6: the figure counts both families, its IPv6 part beside it.
  $(id).textContent =
    (value === null || value === undefined ? '-' : fmt(value)) + (ipv6 === null ? '' : ' (IPv6 ' + fmt(ipv6) + ')');
  $(id + '-rate').textContent = rate === null ? '' : fmt(rate) + '/s';
}

/** A moved bucket's tooltip lines: where its older connections go, and until when. */
function movedText(/** @type {MovedBucketView} */ m) {
  const before =
    m.before === 'engine'
      ? 'engine ' + m.engineBefore
      : m.before === 'unassigned'
        ? 'no engine (forwarded normally)'
        : m.before === 'refused'
          ? 'no engine (refused, fail closed)'
          : 'an engine that has left (they are reset)';
  return 'in a move until ' + m.until + ': connections older than the move still go to ' + before;
}

/**
 * The warm-up broker's relay in the header: objects and bytes relayed, and its budgets (docs/warmup.md): objects
 * over warmup.maxObjectSize, and how often warmup.maxRelayRate made a relay wait.
 * @param {Record<string, number> | null | undefined} w
 */
function showRelay(w) {
  $('warmup-box').hidden = !w;
  if (!w) return;
  const n = (/** @type {string} */ k) => w[k] ?? 0;
  $('warmup-relay').textContent =
    n('http-relayed') +
    ' objects, ' +
    (n('http-bytes') / 1e6).toFixed(1) +
    ' MB; too large ' +
    n('http-too-large') +
    ', rate waits ' +
    n('http-rate-waits') +
    (n('relay-process-exits') > 0 ? ', relay process ended ' + n('relay-process-exits') : '');
}

/**
 * wccpctl's words for a warm-up (render.ts warmupText, in the engine's flagsText: "warming: 12/40 peer hits (30%), 8m
 * left", "warmed: ... ended by duration"): the page shows them in a column of their own.
 */
const WARMUP_FLAG = /^warm(ing|ed): /;

/** The maintenance column: the window running now, else the next one. */
function maintenanceText(/** @type {EngineView} */ e) {
  const m = e.maintenance;
  if (!m) return '-';
  if (m.activeUntil) return 'until ' + m.activeUntil;
  return m.next ? 'next ' + m.next + ' (' + m.nextCron + ')' : '-';
}

/**
 * The change number the data plane holds beside the one decided: "behind" (red) while an apply runs or is retried
 * after a failure, so "the grid says B but traffic goes to A" can be told from a wrong table.
 */
function showInForce(/** @type {BucketsView} */ table) {
  const f = table.inForce;
  const el = $('inforce');
  const behind = f !== null && f.changeNumber !== table.changeNumber;
  el.textContent = f === null ? 'none' : behind ? f.changeNumber + ' (behind)' : String(f.changeNumber);
  el.className = behind ? 'behind' : '';
  el.title =
    f === null ? 'the data plane has applied no table (not yet, or its backend redirects nothing)' : 'applied ' + f.at;
  document.body.dataset.inForce = f === null ? 'none' : String(f.changeNumber);
}

// Samples are timed on the monotonic clock: a step of this machine's wall clock neither stops nor skews them.
let lastSampleAt = -Infinity;
/** @type {Map<string, { conns: number | null, packets: number | null }>} */
let engineRates = new Map();
async function refresh() {
  try {
    /** @type {[StatusView, BucketsView, EnginesView]} */
    const [status, table, engineList] = await Promise.all([
      getJson('status'),
      getJson('services/' + service + '/buckets'),
      getJson('services/' + service + '/engines'),
    ]);
    const svc = status.services.find((s) => s.id === service);
    const engines = engineList.engines; // sorted by address by the API: colours follow that order
    const select = /** @type {HTMLSelectElement} */ ($('service'));
    const ids = status.services.map((s) => String(s.id));
    if ([...select.options].map((o) => o.value).join() !== ids.join()) {
      select.replaceChildren(
        ...status.services.map((s) => {
          const o = document.createElement('option');
          o.textContent = s.id + ' (' + s.name + ')';
          o.value = String(s.id);
          return o;
        }),
      );
    }
    select.value = String(service);
    select.disabled = ids.length < 2;
    $('router').textContent = status.routerId + ' (WCCP ' + status.protocolVersion + ')';
    $('mode').textContent = svc ? (svc.state === 'active' ? svc.mode : svc.state) : '';
    $('mode').className = 'badge ' + (svc ? svc.state : '');
    $('change').textContent = String(table.changeNumber);
    showInForce(table);
    $('backend').textContent = status.dataplane ? status.dataplane.backend : '-';
    showRelay(status.warmup);

    const now = performance.now();
    /** @type {Partial<ServiceCountersView>} */
    const c = svc ? svc.counters : {};
    if (now - lastSampleAt >= SAMPLE_MS * 0.9) {
      lastSampleAt = now;
      addSample({
        t: now,
        backend: status.dataplane ? status.dataplane.backend : '?',
        owners: table.buckets.slice(),
        conns: table.counters ? table.counters.map((x) => x.connections) : null,
        packets: new Map(engines.map((e) => [e.address, e.packets || 0])),
        service: {
          redirected: c.packetsRedirected ?? null,
          denied: c.packetsDenied ?? null,
          unassigned: c.packetsUnassigned ?? null,
        },
      });
      const a = samples[samples.length - 2];
      const b = samples[samples.length - 1];
      engineRates = new Map();
      if (a) {
        const conns = connRates(a, b);
        for (const e of engines) {
          engineRates.set(e.address, {
            conns: a.conns ? conns.get(e.address) || 0 : null,
            packets: packetRate(a, b, e.address),
          });
        }
      }
      /** @type {(k: ServiceCounter) => number | null} */
      const rate = (k) => {
        const va = a?.service[k];
        const vb = b.service[k];
        if (va === null || va === undefined || vb === null || vb < va) return null;
        return (vb - va) / ((b.t - a.t) / 1000);
      };
      const v6 = c.ipv6 ?? null;
      counterCell('redirected', c.packetsRedirected, rate('redirected'), v6 && v6.packetsRedirected);
      counterCell('denied', c.packetsDenied, rate('denied'), v6 && v6.packetsDenied);
      counterCell('unassigned', c.packetsUnassigned, rate('unassigned'), v6 && v6.packetsUnassigned);
      drawChart(engines);
      shade();
    }
    $('hia').textContent = fmt(c.hereIAmReceived);
    $('rebalances').textContent = fmt(c.rebalances);
    $('authfail').textContent = fmt((c.authFailures || 0) + (c.messagesDenied || 0));

    /** @type {Map<number, MovedBucketView>} */
    const moved = new Map((table.moved || []).map((m) => [m.bucket, m]));
    /** @type {Map<number, WarmingBucketView>} */
    const warming = new Map((table.warming || []).map((w) => [w.bucket, w]));
    table.buckets.forEach((ip, i) => {
      const cell = cells[i];
      const move = moved.get(i);
      const warm = warming.get(i);
      cell.dataset.engine = ip ?? '';
      cell.classList.toggle('moved', move !== undefined);
      cell.classList.toggle('warming', warm !== undefined);
      cell.textContent = i.toString(16).padStart(2, '0') + (move ? '*' : '');
      if (move) cell.dataset.movedBefore = move.engineBefore ?? move.before;
      else delete cell.dataset.movedBefore;
      if (warm) cell.dataset.warmingFrom = warm.previousOwner;
      else delete cell.dataset.warmingFrom;
      // The colour alone: the warming stripes are a background image of the class.
      cell.style.backgroundColor = colourOf(engines, ip);
      const counted = table.counters ? table.counters[i] : null;
      const e = ip === null ? null : engines.find((x) => x.address === ip);
      cell.title =
        'bucket ' +
        i +
        ' (0x' +
        i.toString(16).padStart(2, '0') +
        ')\nengine ' +
        (ip ?? 'unassigned') +
        (counted ? '\nnew connections ' + counted.connections + ' since start' : '') +
        (cell.dataset.connections !== undefined ? ', ' + cell.dataset.connections + ' recently' : '') +
        (e ? '\nengine state ' + e.state + '\nengine packets ' + (e.packets ?? 0) + ', bytes ' + (e.bytes ?? 0) : '') +
        (move ? '\n' + movedText(move) : '') +
        (warm
          ? '\nbeing warmed: the broker asks ' + warm.previousOwner + ' (its previous owner) about its misses'
          : '');
    });
    const buckets = (/** @type {number} */ n) => n + ' bucket' + (n > 1 ? 's' : '');
    $('moved-note').textContent = moved.size
      ? '* dashed: ' +
        buckets(moved.size) +
        ' in a move: connections older than the move still go where the bucket went before, new ones to its' +
        ' engine now, until the move ends (hover a bucket: where before, until when)'
      : '';
    const warmers = [...new Set([...warming.values()].map((w) => w.engine))].join(', ');
    $('warming-note').textContent = warming.size
      ? 'striped: ' +
        buckets(warming.size) +
        ' being warmed: ' +
        warmers +
        ' gained ' +
        (warming.size > 1 ? 'them' : 'it') +
        ' from a warm engine, and the warm-up broker asks that engine about its misses there'
      : '';
    const tbody = $('engines');
    tbody.replaceChildren();
    engines.forEach((e) => {
      const tr = document.createElement('tr');
      tr.dataset.engine = e.address;
      tr.dataset.warming = String(e.warmup?.warming ?? false);
      const sw = text('td', '');
      const dot = text('span', '', 'swatch');
      dot.style.background = colourOf(engines, e.address);
      sw.appendChild(dot);
      const r = engineRates.get(e.address) || { conns: null, packets: null };
      const health = text('td', e.probeRttMs == null ? '-' : 'probe ' + e.probeRttMs.toFixed(1) + ' ms', 'health');
      tr.append(
        sw,
        text('td', e.address),
        text('td', e.state, 'state ' + e.state),
        text('td', e.reason || '', 'reason'),
        health,
        text('td', (e.flagsText || []).filter((f) => !WARMUP_FLAG.test(f)).join(', ')),
        text(
          'td',
          (e.flagsText || []).find((f) => WARMUP_FLAG.test(f)) ?? '-',
          'warmup' + (e.warmup?.warming ? ' warming' : ''),
        ),
        text('td', String(e.weight)),
        text('td', e.buckets + ' (' + (e.share * 100).toFixed(1) + '%)'),
        text('td', e.lastHereIAmAgoMs == null ? '-' : (e.lastHereIAmAgoMs / 1000).toFixed(1) + ' s ago'),
        text('td', maintenanceText(e), 'maintenance'),
        text('td', r.conns === null ? '-' : fmt(r.conns), 'num'),
        text('td', r.packets === null ? '-' : fmt(r.packets), 'num'),
        text('td', fmt(e.packets ?? 0), 'num'),
        text('td', fmt(e.bytes ?? 0), 'num'),
      );
      tbody.appendChild(tr);
    });
    $('error').textContent = '';
    document.body.dataset.changeNumber = String(table.changeNumber);
  } catch (err) {
    $('error').textContent = err instanceof Error ? err.message : String(err);
  }
}
function addEvent(/** @type {EventView} */ ev) {
  if (ev.service !== undefined && ev.service !== service) return;
  const li = document.createElement('li');
  const when = new Date(ev.time ?? Date.now()).toLocaleTimeString();
  li.textContent =
    when +
    '  ' +
    (ev.type === 'engine-state'
      ? 'service ' + ev.service + ' engine ' + ev.engine + ': ' + ev.from + ' -> ' + ev.to + ' (' + ev.reason + ')'
      : ev.type === 'table'
        ? 'service ' + ev.service + ' table ' + ev.changeNumber + ': ' + ev.moved + ' buckets moved (' + ev.reason + ')'
        : ev.type === 'warmup'
          ? 'service ' +
            ev.service +
            ' engine ' +
            ev.engine +
            (ev.to === 'warming'
              ? ': warming (' + ev.reason + ')'
              : ': warm-up ended, ' + ev.peerHits + '/' + ev.queries + ' peer hits (' + ev.reason + ')')
          : JSON.stringify(ev));
  li.className = ev.type === 'engine-state' ? 'ev ' + ev.to : ev.type === 'warmup' ? 'ev warmup' : 'ev';
  const list = $('events');
  list.prepend(li);
  while (list.children.length > 50) list.lastChild?.remove();
}
function loadEvents() {
  $('events').replaceChildren();
  getJson('events?limit=50')
    .then((/** @type {{ events?: EventView[] }} */ r) => (r.events || []).forEach(addEvent))
    .catch(() => {
      /* the next refresh shows the error */
    });
}
$('service').addEventListener('change', (ev) => {
  service = Number(/** @type {HTMLSelectElement} */ (ev.target).value);
  const u = new URL(location.href);
  u.searchParams.set('service', String(service));
  history.replaceState(null, '', u);
  samples = [];
  lastSampleAt = -Infinity;
  loadEvents();
  refresh();
});
/** @type {ReturnType<typeof setTimeout> | undefined} */
let timer;
function soon() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 50);
}
loadEvents();
const es = new EventSource('/api/v1/events');
es.addEventListener('message', (m) => {
  try {
    addEvent(JSON.parse(m.data));
  } catch {
    /* keep-alive */
  }
  soon();
});
es.addEventListener('error', () => {
  $('error').textContent = 'live updates interrupted; retrying';
});
setInterval(refresh, SAMPLE_MS);
refresh();
