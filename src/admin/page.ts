// The live web page at `/`: one self-contained document (no CDN, no bundler; its script is page/app.js). It reads the
// same JSON API as
// wccpctl and listens to /api/v1/events (Server-Sent Events) to refresh without reloading. For an admin who keeps it
// open, it samples the data plane's counters every SAMPLE_MS and keeps the last CHART_WINDOW_MS: new connections per
// second per engine as a chart, and each bucket's new connections over the last SHADE_WINDOW_MS as its cell's shade.
import { readFileSync } from 'node:fs';
import type { PageConfig } from './page/config.js';

/** Engine colours, in the order engines are listed (sorted by address); the API and the page agree on the order. */
// prettier-ignore
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

const PAGE_CONFIG: PageConfig = {
  colours: ENGINE_COLOURS,
  unassigned: UNASSIGNED_COLOUR,
  sampleMs: SAMPLE_MS,
  chartWindowMs: CHART_WINDOW_MS,
  shadeWindowMs: SHADE_WINDOW_MS,
  shadeMin: SHADE_MIN,
};
// The script is a checked source file of its own (tsconfig.page.json), inlined as it is; `npm run build` copies it
// beside this module, so the same relative path serves from src/ and dist/.
const SCRIPT = readFileSync(new URL('./page/app.js', import.meta.url), 'utf8');

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
  #inforce.behind { color: #c00; }
  main { display: grid; grid-template-columns: auto 1fr; gap: 0 2em; }
  #grid { display: grid; grid-template-columns: repeat(16, 1.9em); gap: 2px; }
  .cell { height: 1.9em; font: 10px/1.9em monospace; text-align: center; color: #fff; border-radius: 2px;
          text-shadow: 0 0 2px #000; cursor: default; }
  .cell.moved { outline: 2px dashed #000; outline-offset: -2px; }
  .cell.warming { background-image: repeating-linear-gradient(135deg, rgba(255,255,255,0.55) 0 2px, transparent 2px 6px); }
  #moved-note, #warming-note { width: 0; min-width: 100%; }  /* wrap at the grid's width, never widen its column */
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
  td.warmup { font-size: 12px; max-width: 18em; } td.warmup.warming { color: #a60; font-weight: 600; }
  .swatch { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px; vertical-align: -0.1em; }
  .state.usable { color: #080; } .state.joining { color: #a60; } .state.draining { color: #a0a; } .state.suspect { color: #c60; } .state.gone { color: #c00; }
  #events { font: 12px monospace; list-style: none; padding: 0; margin: 0; max-height: 14em; overflow: auto; }
  #events .ev.gone, #events .ev.suspect { color: #b00; } #events .ev.usable { color: #060; } #events .ev.warmup { color: #a60; }
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
  <span>in force <b id="inforce">-</b></span>
  <span>data plane <b id="backend">-</b></span>
  <span id="warmup-box" hidden title="the warm-up broker's relay (docs/warmup.md)">relayed <b id="warmup-relay">-</b></span>
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
    <div id="shade-note" class="note"></div><div id="moved-note" class="note"></div><div id="warming-note" class="note"></div>
  </section>
  <section>
    <h2>New connections per second, per engine</h2>
    <svg id="chart" viewBox="0 0 640 200" role="img" aria-label="new connections per second per engine"></svg>
    <div id="legend"></div><div id="chart-note" class="note"></div>
  </section>
  <section style="grid-column: 1 / -1">
    <h2>Engines</h2>
    <table><thead><tr><th></th><th>engine</th><th>state</th><th>reason</th><th>health</th><th>flags</th><th>warm-up</th><th>weight</th><th>buckets</th>
    <th>last HERE_I_AM</th><th>maintenance</th><th>new conn/s</th><th>packets/s</th><th>packets</th><th>bytes</th></tr></thead><tbody id="engines"></tbody></table>
    <h2>Events</h2><ul id="events"></ul>
  </section>
</main>
<script type="application/json" id="page-config">${JSON.stringify(PAGE_CONFIG)}</script>
<script>
${SCRIPT}
</script>
</body>
</html>
`;
