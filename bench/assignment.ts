// Buckets moved per membership change: wccpd's balance (minimal movement), consistent (history-free, for several
// gateways) and Squid's round-robin; and the time to compute a 32-engine table. Run: npx tsx bench/assignment.ts
import { assignBuckets, type Member } from '../src/buckets/assign.js';
import { checkArgs, orExit } from './cli.js';
import { emptyTable, movedBuckets, countsByEngine, type BucketTable } from '../src/buckets/table.js';

const CLI = {
  name: 'bench/assignment',
  usage: `usage: npx tsx bench/assignment.ts
For N = 1..32 engines: buckets moved per join and leave by balance, consistent and Squid's round-robin against the
ideal, and the time to compute a 32-engine table (bench/README.md). Takes no options.`,
};
orExit(CLI, () => checkArgs(CLI, process.argv.slice(2)));

const engine = (i: number): Member => ({ address: `192.0.2.${i + 1}`, weight: 1, priority: 0 });
const first = (n: number): Member[] => Array.from({ length: n }, (_, i) => engine(i));
const balance = { mode: 'balance' } as const;
const rr = { mode: 'round-robin' } as const;
const cons = { mode: 'consistent' } as const;

// The least any table within one bucket of equal shares can move from `prev` (see docs/buckets.md).
function ideal(prev: BucketTable, members: readonly Member[]): number {
  const held = countsByEngine(prev);
  const floor = Math.floor(256 / members.length);
  const fractional = 256 % members.length !== 0;
  let moves = 0;
  let keepCeiling = 0;
  for (const m of members) {
    const h = held.get(m.address) ?? 0;
    moves += Math.max(0, floor - h);
    if (fractional && h > floor) keepCeiling++;
  }
  return moves + Math.max(0, 256 - floor * members.length - keepCeiling);
}

// Ours grows one engine at a time, as a real group does.
const ours: BucketTable[] = [emptyTable()];
for (let n = 1; n <= 33; n++) ours.push(assignBuckets(ours[n - 1] as BucketTable, first(n), balance));
const roundRobin = (members: readonly Member[]): BucketTable => assignBuckets(emptyTable(), members, rr);
// Consistent needs no history: its table is computed from the members alone.
const consistent = (members: readonly Member[]): BucketTable => assignBuckets(emptyTable(), members, cons);

const rows: string[][] = [];
for (let n = 1; n <= 32; n++) {
  const table = ours[n] as BucketTable;
  const rrTable = roundRobin(first(n));
  const cTable = consistent(first(n));
  const add = movedBuckets(table, assignBuckets(table, first(n + 1), balance)).length;
  const rrAdd = movedBuckets(rrTable, roundRobin(first(n + 1))).length;
  const cAdd = movedBuckets(cTable, consistent(first(n + 1))).length;
  const addIdeal = ideal(table, first(n + 1));
  const cAddIdeal = ideal(cTable, first(n + 1));
  const row = [
    `${n}`,
    `${add}`,
    `${cAdd}`,
    `${rrAdd}`,
    `${addIdeal}`,
    `${add - addIdeal}`,
    `${cAdd - cAddIdeal}`,
    `${rrAdd - ideal(rrTable, first(n + 1))}`,
  ];
  if (n > 1) {
    const left = first(n).filter((_, i) => i !== Math.floor(n / 2)); // a middle engine leaves
    const rem = movedBuckets(table, assignBuckets(table, left, balance)).length;
    const rrRem = movedBuckets(rrTable, roundRobin(left)).length;
    const cRem = movedBuckets(cTable, consistent(left)).length;
    const remIdeal = ideal(table, left);
    row.push(
      `${rem}`,
      `${cRem}`,
      `${rrRem}`,
      `${remIdeal}`,
      `${rem - remIdeal}`,
      `${cRem - ideal(cTable, left)}`,
      `${rrRem - ideal(rrTable, left)}`,
    );
  } else {
    row.push('-', '-', '-', '-', '-', '-', '-');
  }
  rows.push(row);
}

// Each excess is measured against the least any table within one bucket of the shares could move from that
// algorithm's own previous table.
const header = [
  'N',
  'add:bal',
  'add:cons',
  'add:rr',
  'add:min',
  'xs:bal',
  'xs:cons',
  'xs:rr',
  'rm:bal',
  'rm:cons',
  'rm:rr',
  'rm:min',
  'xs:bal',
  'xs:cons',
  'xs:rr',
];
const width = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
const line = (cells: readonly string[]): string => cells.map((c, i) => c.padStart(width[i] ?? 0)).join('  ');
console.log('Buckets moved (of 256), equal weights: N -> N+1 (add) and N -> N-1 (a middle engine leaves);');
console.log("bal = balance (minimal movement), cons = consistent (history-free), rr = Squid's round-robin;");
console.log('min = the least any table within one bucket of the shares can move; xs = moved - min (excess moves)');
console.log(line(header));
for (const r of rows) console.log(line(r));
const total = (col: number): number => rows.reduce((s, r) => s + (Number(r[col]) || 0), 0);
console.log(line(['sum', ...header.slice(1).map((_, i) => `${total(i + 1)}`)]));
const changes = rows.length + rows.length - 1;
const perChange = (a: number, b: number): string => ((total(a) + total(b)) / changes).toFixed(1);
console.log(
  `Excess moves per change (mean of ${changes} changes): balance ${perChange(5, 12)}, ` +
    `consistent ${perChange(6, 13)}, round-robin ${perChange(7, 14)}`,
);

// Time to compute the 32-engine table from the 31-engine one, both algorithms interleaved in the same run.
const from = ours[31] as BucketTable;
const members32 = first(32);
const rounds = 21;
const perRound = 200;
const samples: { ours: number[]; cons: number[]; rr: number[] } = { ours: [], cons: [], rr: [] };
const time = (f: () => unknown): number => {
  const t0 = performance.now();
  for (let i = 0; i < perRound; i++) f();
  return ((performance.now() - t0) * 1000) / perRound;
};
for (let i = 0; i < 3; i++) {
  time(() => assignBuckets(from, members32, balance));
  time(() => assignBuckets(from, members32, cons));
  time(() => assignBuckets(from, members32, rr));
}
for (let r = 0; r < rounds; r++) {
  samples.ours.push(time(() => assignBuckets(from, members32, balance)));
  samples.cons.push(time(() => assignBuckets(from, members32, cons)));
  samples.rr.push(time(() => assignBuckets(from, members32, rr)));
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
const o = median(samples.ours);
const c = median(samples.cons);
const q = median(samples.rr);
console.log('');
console.log(
  `Time to compute a 32-engine table (31 -> 32), median of ${rounds} rounds x ${perRound} runs, interleaved:`,
);
console.log(
  `  balance: ${o.toFixed(1)} us   consistent: ${c.toFixed(1)} us   round-robin: ${q.toFixed(1)} us   ` +
    `ratios balance/rr: ${(o / q).toFixed(2)}  consistent/rr: ${(c / q).toFixed(2)}`,
);
