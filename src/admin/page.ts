// The live web page at `/`: one self-contained document (no CDN, no build step). It reads the same JSON API as
// wccpctl and listens to /api/v1/events (Server-Sent Events) to refresh without reloading. For an admin who keeps it
// open, it samples the data plane's counters every SAMPLE_MS and keeps the last CHART_WINDOW_MS: new connections per
// second per engine as a chart, and each bucket's new connections over the last SHADE_WINDOW_MS as its cell's shade.

/** Engine colours, in the order engines are listed (sorted by address); the API and the page agree on the order. */
export const ENGINE_COLOURS = [
  '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
  '#bcbd22', '#17becf', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd',
  '#e6550d', '#31a354', '#756bb1', '#636363', '#6baed6', '#fd8d3c', '#74c476', '#9e9ac8',
  '#969696', '#9ecae1', '#fdae6b', '#a1d99b', '#bcbddc', '#c7e9c0', '#dadaeb', '#fdd0a2',
] as const;
export const UNASSIGNED_COLOUR = '#e8e8e8';


/** How often the page samples the API for its chart and shading (ms). */
export const SAMPLE_MS = 2000;
/** The chart's time span (ms); the page keeps no more samples than that. */
export const CHART_WINDOW_MS = 5 * 60_000;
/** A cell's shade counts the bucket's new connections over this window, or since the page opened if later (ms). */
export const SHADE_WINDOW_MS = 60_000;
/** An idle bucket's opacity; the busiest bucket of the window is fully opaque. */
export const SHADE_MIN = 0.25;

/** The opacity of a cell whose bucket saw `n` new connections in the window, when the busiest saw `max`. */
export function shadeOpacity(n: number, max: number): number {
  return max <= 0 ? 1 : SHADE_MIN + (1 - SHADE_MIN) * (n / max);
}

const SCRIPT = String.raw`
const COLOURS = ${JSON.stringify(ENGINE_COLOURS)};
const UNASSIGNED = ${JSON.stringify(UNASSIGNED_COLOUR)};
const SAMPLE_MS = ${SAMPLE_MS};
const CHART_WINDOW_MS = ${CHART_WINDOW_MS};
const SHADE_WINDOW_MS = ${SHADE_WINDOW_MS};
const SHADE_MIN = ${SHADE_MIN};
const SVG = 'http://www.w3.org/2000/svg';
const params = new URLSearchParams(location.search);
let service = Number(params.get('service') || 0);
const $ = (id) => document.getElementById(id);
const grid = $('grid');
const cells = [];
for (let i = 0; i < 256; i++) {
  const c = document.createElement('div');
  c.className = 'cell';
  c.dataset.bucket = String(i);
  c.textContent = i.toString(16).padStart(2, '0');
  grid.appendChild(c);
  cells.push(c);
}
function colourOf(engines, ip) {
  if (ip === null) return UNASSIGNED;
  const i = engines.findIndex((e) => e.address === ip);
  return i < 0 ? UNASSIGNED : COLOURS[i % COLOURS.length];
}
async function getJson(path) {
  const r = await fetch('/api/v1/' + path, { cache: 'no-store' });
  if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
  return r.json();
}
function text(tag, value, cls) {
  const el = document.createElement(tag);
  el.textContent = value;
  if (cls) el.className = cls;
  return el;
}
function fmt(n) {
  if (n === null || n === undefined) return '-';
  if (n >= 1e9) return (n / 1e9).toFixed(2) + ' G';
  if (n >= 1e6) return (n / 1e6).toFixed(2) + ' M';
  if (n >= 1e4) return (n / 1e3).toFixed(1) + ' k';
  return String(Math.round(n * 10) / 10);
}

// Samples of the data plane's counters: { t, owners (256 engine addresses or null), conns (256 counts, or null when
// the data plane does not count), packets (engine -> packets), service counters }. Bounded by the chart's window.
let samples = [];
function addSample(s) {
  const last = samples[samples.length - 1];
  // A counter that went down means the daemon restarted: the older samples no longer compare.
  if (last && last.conns && s.conns && s.conns.some((n, i) => n < last.conns[i])) samples = [];
  samples.push(s);
  while (samples.length > 1 && samples[0].t < s.t - CHART_WINDOW_MS - SAMPLE_MS) samples.shift();
}
/** New connections per second per engine (and 'direct' for buckets without one) between two samples. */
function connRates(a, b) {
  const out = new Map();
  if (!a.conns || !b.conns) return out;
  const dt = (b.t - a.t) / 1000;
  for (let i = 0; i < 256; i++) {
    const d = b.conns[i] - a.conns[i];
    if (d <= 0) continue;
    const who = b.owners[i] === null ? 'direct' : b.owners[i];
    out.set(who, (out.get(who) || 0) + d / dt);
  }
  return out;
}
function packetRate(a, b, ip) {
  const pa = a.packets.get(ip); const pb = b.packets.get(ip);
  if (pa === undefined || pb === undefined || pb < pa) return null;
  return (pb - pa) / ((b.t - a.t) / 1000);
}

function drawChart(engines) {
  const svg = $('chart');
  const W = 640, H = 200, L = 44, R = 8, T = 8, B = 22;
  svg.replaceChildren();
  svg.dataset.samples = String(samples.length);
  const latest = samples[samples.length - 1];
  if (!latest || !latest.conns) {
    $('chart-note').textContent = latest ? 'this data plane does not count connections (backend ' + latest.backend + ')' : '';
    return;
  }
  const series = new Map();
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
  const step = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000].find((x) => x * 4 >= max) || Math.ceil(max / 4);
  const top = step * 4;
  const x = (t) => L + (W - L - R) * (1 - (latest.t - t) / span);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const line = (x1, y1, x2, y2, cls) => {
    const l = document.createElementNS(SVG, 'line');
    l.setAttribute('x1', x1); l.setAttribute('y1', y1); l.setAttribute('x2', x2); l.setAttribute('y2', y2);
    l.setAttribute('class', cls);
    svg.appendChild(l);
  };
  const label = (tx, ty, s, anchor) => {
    const el = document.createElementNS(SVG, 'text');
    el.setAttribute('x', tx); el.setAttribute('y', ty); el.setAttribute('text-anchor', anchor);
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
    label(x(latest.t - ago), H - 6, m === 0 ? 'now' : ago % 60000 === 0 ? '-' + ago / 60000 + ' min' : '-' + ago / 1000 + ' s', m === 0 ? 'end' : 'middle');
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
    pl.setAttribute('points', pts.filter((p) => p.t >= latest.t - span).map((p) => x(p.t).toFixed(1) + ',' + y(p.v).toFixed(1)).join(' '));
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

function shade(table) {
  const latest = samples[samples.length - 1];
  if (!latest || !latest.conns) {
    cells.forEach((c) => { c.style.opacity = '1'; delete c.dataset.connections; });
    $('shade-note').textContent = '';
    return;
  }
  let base = latest;
  for (const s of samples) if (s.t >= latest.t - SHADE_WINDOW_MS - SAMPLE_MS / 2 && s.conns) { base = s; break; }
  const n = latest.conns.map((v, i) => Math.max(0, v - base.conns[i]));
  const max = Math.max(0, ...n);
  cells.forEach((c, i) => {
    c.dataset.connections = String(n[i]);
    c.style.opacity = String(max <= 0 ? 1 : SHADE_MIN + (1 - SHADE_MIN) * (n[i] / max));
  });
  const span = Math.round((latest.t - base.t) / 1000);
  $('shade-note').textContent = 'shade: new connections per bucket in the last ' + span + ' s (darkest: ' + max + ')';
  grid.dataset.shadeMax = String(max);
}

function counterCell(id, value, rate) {
  $(id).textContent = value === null || value === undefined ? '-' : fmt(value);
  $(id + '-rate').textContent = rate === null ? '' : fmt(rate) + '/s';
}

let lastSampleAt = 0;
let engineRates = new Map();
async function refresh() {
  try {
    const [status, table, engineList] = await Promise.all([
      getJson('status'), getJson('services/' + service + '/buckets'), getJson('services/' + service + '/engines'),
    ]);
    const svc = (status.services || []).find((s) => s.id === service) || {};
    const engines = engineList.engines; // sorted by address by the API: colours follow that order
    const select = $('service');
    const ids = (status.services || []).map((s) => String(s.id));
    if ([...select.options].map((o) => o.value).join() !== ids.join()) {
      select.replaceChildren(...(status.services || []).map((s) => {
        const o = text('option', s.id + ' (' + s.name + ')');
        o.value = String(s.id);
        return o;
      }));
    }
    select.value = String(service);
    select.disabled = ids.length < 2;
    $('router').textContent = status.routerId + ' (WCCP ' + status.protocolVersion + ')';
    $('mode').textContent = svc.state === 'active' ? svc.mode : svc.state;
    $('mode').className = 'badge ' + (svc.state || '');
    $('change').textContent = String(table.changeNumber);
    $('backend').textContent = status.dataplane ? status.dataplane.backend : '-';

    const now = Date.now();
    const c = svc.counters || {};
    if (now - lastSampleAt >= SAMPLE_MS * 0.9) {
      lastSampleAt = now;
      addSample({
        t: now, backend: status.dataplane ? status.dataplane.backend : '?',
        owners: table.buckets.slice(),
        conns: table.counters ? table.counters.map((x) => x.connections) : null,
        packets: new Map(engines.map((e) => [e.address, e.packets || 0])),
        service: { redirected: c.packetsRedirected, denied: c.packetsDenied, unassigned: c.packetsUnassigned },
      });
      const a = samples[samples.length - 2];
      const b = samples[samples.length - 1];
      engineRates = new Map();
      if (a) {
        const conns = connRates(a, b);
        for (const e of engines) engineRates.set(e.address, { conns: a.conns ? conns.get(e.address) || 0 : null, packets: packetRate(a, b, e.address) });
      }
      const rate = (k) => {
        if (!a || a.service[k] === null || a.service[k] === undefined || b.service[k] === null || b.service[k] < a.service[k]) return null;
        return (b.service[k] - a.service[k]) / ((b.t - a.t) / 1000);
      };
      counterCell('redirected', c.packetsRedirected, rate('redirected'));
      counterCell('denied', c.packetsDenied, rate('denied'));
      counterCell('unassigned', c.packetsUnassigned, rate('unassigned'));
      drawChart(engines);
      shade(table);
    }
    $('hia').textContent = fmt(c.hereIAmReceived);
    $('rebalances').textContent = fmt(c.rebalances);
    $('authfail').textContent = fmt((c.authFailures || 0) + (c.messagesDenied || 0));

    table.buckets.forEach((ip, i) => {
      const cell = cells[i];
      cell.dataset.engine = ip ?? '';
      cell.style.background = colourOf(engines, ip);
      const counted = table.counters ? table.counters[i] : null;
      const e = ip === null ? null : engines.find((x) => x.address === ip);
      cell.title = 'bucket ' + i + ' (0x' + i.toString(16).padStart(2, '0') + ')\nengine ' + (ip ?? 'unassigned') +
        (counted ? '\nnew connections ' + counted.connections + ' since start' : '') +
        (cell.dataset.connections !== undefined ? ', ' + cell.dataset.connections + ' recently' : '') +
        (e ? '\nengine state ' + e.state + '\nengine packets ' + (e.packets ?? 0) + ', bytes ' + (e.bytes ?? 0) : '');
    });
    const tbody = $('engines');
    tbody.replaceChildren();
    engines.forEach((e) => {
      const tr = document.createElement('tr');
      tr.dataset.engine = e.address;
      const sw = text('td', '');
      const dot = text('span', '', 'swatch');
      dot.style.background = colourOf(engines, e.address);
      sw.appendChild(dot);
      const r = engineRates.get(e.address) || { conns: null, packets: null };
      const health = text('td', e.probeRttMs == null ? '-' : 'probe ' + e.probeRttMs.toFixed(1) + ' ms', 'health');
      tr.append(sw, text('td', e.address), text('td', e.state, 'state ' + e.state),
        text('td', e.reason || '', 'reason'), health,
        text('td', (e.flagsText || []).join(', ')), text('td', String(e.weight)),
        text('td', e.buckets + ' (' + (e.share * 100).toFixed(1) + '%)'),
        text('td', e.lastHereIAmAgoMs == null ? '-' : (e.lastHereIAmAgoMs / 1000).toFixed(1) + ' s ago'),
        text('td', !e.maintenance ? '-' : e.maintenance.activeUntil ? 'until ' + e.maintenance.activeUntil
          : e.maintenance.next ? 'next ' + e.maintenance.next + ' (' + e.maintenance.nextCron + ')' : '-', 'maintenance'),
        text('td', r.conns === null ? '-' : fmt(r.conns), 'num'), text('td', r.packets === null ? '-' : fmt(r.packets), 'num'),
        text('td', fmt(e.packets ?? 0), 'num'), text('td', fmt(e.bytes ?? 0), 'num'));
      tbody.appendChild(tr);
    });
    $('error').textContent = '';
    document.body.dataset.changeNumber = String(table.changeNumber);
  } catch (err) {
    $('error').textContent = String(err.message || err);
  }
}
function addEvent(ev) {
  if (ev.service !== undefined && ev.service !== service) return;
  const li = document.createElement('li');
  const when = new Date(ev.time ?? Date.now()).toLocaleTimeString();
  li.textContent = when + '  ' + (ev.type === 'engine-state'
    ? 'service ' + ev.service + ' engine ' + ev.engine + ': ' + ev.from + ' -> ' + ev.to + ' (' + ev.reason + ')'
    : ev.type === 'table'
      ? 'service ' + ev.service + ' table ' + ev.changeNumber + ': ' + ev.moved + ' buckets moved (' + ev.reason + ')'
      : JSON.stringify(ev));
  li.className = ev.type === 'engine-state' ? 'ev ' + ev.to : 'ev';
  const list = $('events');
  list.prepend(li);
  while (list.children.length > 50) list.lastChild.remove();
}
function loadEvents() {
  $('events').replaceChildren();
  getJson('events?limit=50').then((r) => (r.events || []).forEach(addEvent)).catch(() => {});
}
$('service').addEventListener('change', (ev) => {
  service = Number(ev.target.value);
  const u = new URL(location.href);
  u.searchParams.set('service', String(service));
  history.replaceState(null, '', u);
  samples = [];
  lastSampleAt = 0;
  loadEvents();
  refresh();
});
let timer = null;
function soon() { clearTimeout(timer); timer = setTimeout(refresh, 50); }
loadEvents();
const es = new EventSource('/api/v1/events');
es.onmessage = (m) => { try { addEvent(JSON.parse(m.data)); } catch { /* keep-alive */ } soon(); };
es.onerror = () => { $('error').textContent = 'live updates interrupted; retrying'; };
setInterval(refresh, SAMPLE_MS);
refresh();
`;

export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>wccpd</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.2em 1.5em; color: #222; }
  header { display: flex; gap: 1.6em; align-items: baseline; flex-wrap: wrap; }
  h1 { margin: 0; font-size: 1.4em; }
  h2 { font-size: 1.05em; margin: 0.9em 0 0.4em; }
  .badge { padding: 0.1em 0.6em; border-radius: 0.8em; background: #dfe; }
  .badge.bypass { background: #fed; } .badge.closed { background: #fcc; }
  main { display: grid; grid-template-columns: auto 1fr; gap: 0 2em; }
  #grid { display: grid; grid-template-columns: repeat(16, 1.9em); gap: 2px; }
  .cell { height: 1.9em; font: 10px/1.9em monospace; text-align: center; color: #fff; border-radius: 2px;
          text-shadow: 0 0 2px #000; cursor: default; }
  .note { color: #666; font-size: 12px; }
  #counters { display: flex; gap: 1.4em; flex-wrap: wrap; margin-top: 0.6em; }
  #counters div { border: 1px solid #eee; border-radius: 4px; padding: 0.2em 0.6em; }
  #counters b { font-size: 1.15em; } #counters .rate { color: #666; font-size: 12px; margin-left: 0.3em; }
  #chart { width: 100%; max-width: 640px; height: auto; background: #fcfcfc; border: 1px solid #eee; }
  #chart .grid { stroke: #e6e6e6; } #chart .axis { font: 10px sans-serif; fill: #777; }
  #chart .series { fill: none; } #chart .series.direct { stroke-dasharray: 4 3; }
  #legend { display: flex; gap: 1em; flex-wrap: wrap; font-size: 12px; }
  table { border-collapse: collapse; } td, th { padding: 0.15em 0.55em; text-align: left; border-bottom: 1px solid #eee; }
  th { font-weight: 600; font-size: 12px; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
  td.reason { color: #555; font-size: 12px; max-width: 16em; }
  .swatch { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px; vertical-align: -0.1em; }
  .state.usable { color: #080; } .state.joining { color: #a60; } .state.draining { color: #a0a; } .state.suspect { color: #c60; } .state.gone { color: #c00; }
  #events { font: 12px monospace; list-style: none; padding: 0; margin: 0; max-height: 14em; overflow: auto; }
  #events .ev.gone, #events .ev.suspect { color: #b00; } #events .ev.usable { color: #060; }
  #error { color: #c00; }
</style>
</head>
<body>
<header>
  <h1>wccpd</h1>
  <span>router <b id="router">-</b></span>
  <label>service <select id="service" aria-label="service group"><option value="0">0</option></select></label>
  <span id="mode" class="badge">-</span>
  <span>change number <b id="change">-</b></span>
  <span>data plane <b id="backend">-</b></span>
  <span id="error"></span>
</header>
<section id="counters" aria-label="service counters">
  <div>redirected <b id="redirected">-</b><span id="redirected-rate" class="rate"></span> <span class="note">packets</span></div>
  <div>denied <b id="denied">-</b><span id="denied-rate" class="rate"></span> <span class="note">new connections refused</span></div>
  <div>unassigned <b id="unassigned">-</b><span id="unassigned-rate" class="rate"></span> <span class="note">new connections forwarded direct</span></div>
  <div>HERE_I_AM <b id="hia">-</b></div>
  <div>rebalances <b id="rebalances">-</b></div>
  <div>refused messages <b id="authfail">-</b></div>
</section>
<main>
  <section>
    <h2>Buckets</h2><div id="grid" aria-label="bucket table"></div>
    <div id="shade-note" class="note"></div>
  </section>
  <section>
    <h2>New connections per second, per engine</h2>
    <svg id="chart" viewBox="0 0 640 200" role="img" aria-label="new connections per second per engine"></svg>
    <div id="legend"></div><div id="chart-note" class="note"></div>
  </section>
  <section style="grid-column: 1 / -1">
    <h2>Engines</h2>
    <table><thead><tr><th></th><th>engine</th><th>state</th><th>reason</th><th>health</th><th>flags</th><th>weight</th><th>buckets</th>
    <th>last HERE_I_AM</th><th>maintenance</th><th>new conn/s</th><th>packets/s</th><th>packets</th><th>bytes</th></tr></thead><tbody id="engines"></tbody></table>
    <h2>Events</h2><ul id="events"></ul>
  </section>
</main>
<script>
${SCRIPT}
</script>
</body>
</html>
`;
