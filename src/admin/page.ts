// The live web page at `/`: one self-contained document (no CDN, no build step). It reads the same JSON API as
// wccpctl and listens to /api/v1/events (Server-Sent Events) to refresh without reloading.

/** Engine colours, in the order engines are listed (sorted by address); the API and the page agree on the order. */
export const ENGINE_COLOURS = [
  '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
  '#bcbd22', '#17becf', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#3182bd',
  '#e6550d', '#31a354', '#756bb1', '#636363', '#6baed6', '#fd8d3c', '#74c476', '#9e9ac8',
  '#969696', '#9ecae1', '#fdae6b', '#a1d99b', '#bcbddc', '#c7e9c0', '#dadaeb', '#fdd0a2',
] as const;
export const UNASSIGNED_COLOUR = '#e8e8e8';

const SCRIPT = String.raw`
const COLOURS = ${JSON.stringify(ENGINE_COLOURS)};
const UNASSIGNED = ${JSON.stringify(UNASSIGNED_COLOUR)};
const params = new URLSearchParams(location.search);
let service = Number(params.get('service') ?? 0);
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
let counters = new Map();
async function refresh() {
  try {
    const [status, table, engineList] = await Promise.all([
      getJson('status'), getJson('services/' + service + '/buckets'), getJson('services/' + service + '/engines'),
    ]);
    const svc = (status.services || []).find((s) => s.id === service) || {};
    const engines = engineList.engines; // sorted by address by the API: colours follow that order
    $('router').textContent = status.routerId + ' (WCCP ' + status.protocolVersion + ')';
    $('mode').textContent = svc.state === 'active' ? svc.mode : svc.state;
    $('mode').className = 'badge ' + (svc.state || '');
    $('change').textContent = String(table.changeNumber);
    counters = new Map(engines.map((e) => [e.address, e]));
    table.buckets.forEach((ip, i) => {
      const c = cells[i];
      c.dataset.engine = ip ?? '';
      c.style.background = colourOf(engines, ip);
      const e = ip === null ? null : counters.get(ip);
      const counted = table.counters ? table.counters[i] : null;
      c.title = 'bucket ' + i + ' (0x' + i.toString(16).padStart(2, '0') + ')\nengine ' + (ip ?? 'unassigned') +
        (counted ? '\nnew connections ' + counted.connections : '') +
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
      tr.append(sw, text('td', e.address), text('td', e.state, 'state ' + e.state),
        text('td', (e.flagsText || []).join(', ')), text('td', String(e.weight)),
        text('td', e.buckets + ' (' + (e.share * 100).toFixed(2) + '%)'),
        text('td', e.lastHereIAmAgoMs == null ? '-' : (e.lastHereIAmAgoMs / 1000).toFixed(1) + ' s ago'),
        text('td', e.probeRttMs == null ? '-' : e.probeRttMs.toFixed(1) + ' ms'),
        text('td', String(e.packets ?? 0)), text('td', String(e.bytes ?? 0)));
      tbody.appendChild(tr);
    });
    $('error').textContent = '';
    document.body.dataset.changeNumber = String(table.changeNumber);
  } catch (err) {
    $('error').textContent = String(err.message || err);
  }
}
function addEvent(ev) {
  const li = document.createElement('li');
  const when = new Date(ev.time ?? Date.now()).toLocaleTimeString();
  li.textContent = when + '  ' + (ev.type === 'engine-state'
    ? 'service ' + ev.service + ' engine ' + ev.engine + ': ' + ev.from + ' -> ' + ev.to + ' (' + ev.reason + ')'
    : ev.type === 'table'
      ? 'service ' + ev.service + ' table ' + ev.changeNumber + ': ' + ev.moved + ' buckets moved (' + ev.reason + ')'
      : JSON.stringify(ev));
  const list = $('events');
  list.prepend(li);
  while (list.children.length > 50) list.lastChild.remove();
}
let timer = null;
function soon() { clearTimeout(timer); timer = setTimeout(refresh, 50); }
getJson('events?limit=20').then((r) => (r.events || []).forEach(addEvent)).catch(() => {});
const es = new EventSource('/api/v1/events');
es.onmessage = (m) => { try { addEvent(JSON.parse(m.data)); } catch { /* keep-alive */ } soon(); };
es.onerror = () => { $('error').textContent = 'live updates interrupted; retrying'; };
setInterval(refresh, 5000);
refresh();
`;

export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>wccpd</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  header { display: flex; gap: 2em; align-items: baseline; flex-wrap: wrap; }
  h1 { margin: 0; font-size: 1.4em; }
  .badge { padding: 0.1em 0.6em; border-radius: 0.8em; background: #dfe; }
  .badge.bypass { background: #fed; } .badge.closed { background: #fcc; }
  main { display: grid; grid-template-columns: auto 1fr; gap: 2em; margin-top: 1em; }
  #grid { display: grid; grid-template-columns: repeat(16, 1.9em); gap: 2px; }
  .cell { height: 1.9em; font: 10px/1.9em monospace; text-align: center; color: #fff; border-radius: 2px;
          text-shadow: 0 0 2px #000; cursor: default; }
  table { border-collapse: collapse; } td, th { padding: 0.2em 0.7em; text-align: left; border-bottom: 1px solid #eee; }
  .swatch { display: inline-block; width: 1em; height: 1em; border-radius: 2px; }
  .state.usable { color: #080; } .state.joining { color: #a60; } .state.draining { color: #a0a; } .state.suspect { color: #c60; } .state.gone { color: #c00; }
  #events { font: 12px monospace; list-style: none; padding: 0; max-height: 20em; overflow: auto; }
  #error { color: #c00; }
</style>
</head>
<body>
<header>
  <h1>wccpd</h1>
  <span>router <b id="router">-</b></span>
  <span>service <b id="service">0</b>: <span id="mode" class="badge">-</span></span>
  <span>change number <b id="change">-</b></span>
  <span id="error"></span>
</header>
<main>
  <section><h2>Buckets</h2><div id="grid" aria-label="bucket table"></div></section>
  <section>
    <h2>Engines</h2>
    <table><thead><tr><th></th><th>engine</th><th>state</th><th>flags</th><th>weight</th><th>buckets</th>
    <th>last HERE_I_AM</th><th>probe RTT</th><th>packets</th><th>bytes</th></tr></thead><tbody id="engines"></tbody></table>
    <h2>Events</h2><ul id="events"></ul>
  </section>
</main>
<script>
document.getElementById('service').textContent = new URLSearchParams(location.search).get('service') ?? '0';
${SCRIPT}
</script>
</body>
</html>
`;
