// The page's document as the daemon serves it: the checked script file inlined byte for byte (no copy in a string
// that tsc and eslint never see), and the settings it reads in its `page-config` element. The browser test
// (page.test.ts) shows what the script then draws.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  CHART_WINDOW_MS,
  ENGINE_COLOURS,
  PAGE_HTML,
  SAMPLE_MS,
  SHADE_MIN,
  SHADE_WINDOW_MS,
  UNASSIGNED_COLOUR,
} from '../../src/admin/page.js';

const script = readFileSync(new URL('../../src/admin/page/app.js', import.meta.url), 'utf8');

test('the page inlines src/admin/page/app.js as it is, once, in a script element of its own', () => {
  assert.ok(!script.includes('</script'), 'the script can be inlined: it never closes its element');
  assert.equal(PAGE_HTML.split(script).length, 2, 'the whole file appears exactly once');
  assert.ok(PAGE_HTML.includes(`<script>\n${script}\n</script>`));
});

test('the page-config element carries the colours and windows that page.ts exports', () => {
  const m = /<script type="application\/json" id="page-config">(.*?)<\/script>/s.exec(PAGE_HTML);
  assert.ok(m, 'a page-config element');
  assert.deepEqual(JSON.parse(m[1]!), {
    colours: [...ENGINE_COLOURS],
    unassigned: UNASSIGNED_COLOUR,
    sampleMs: SAMPLE_MS,
    chartWindowMs: CHART_WINDOW_MS,
    shadeWindowMs: SHADE_WINDOW_MS,
    shadeMin: SHADE_MIN,
  });
});

test('every element id the script asks for exists in the page', () => {
  const asked = new Set([...script.matchAll(/\$\('([a-z-]+)'\)/g)].map((x) => x[1]!));
  for (const id of ['redirected', 'denied', 'unassigned']) asked.add(`${id}-rate`);
  assert.ok(asked.size > 10, `found the ids the script reads (${asked.size})`);
  for (const id of asked) assert.ok(PAGE_HTML.includes(`id="${id}"`), `#${id} in the page`);
});
