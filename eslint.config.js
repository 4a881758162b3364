// Lint is part of `npm test`: recommended JS + TypeScript rules, no type-aware rules (tsc does that part).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

// The house (docs/architecture.md, "The house"): each room of src/ (a folder, or a file at the top) and the rooms it
// may import; an import of any other room fails lint. 'room/file.js' allows that one file of a room alone.
const HOUSE = {
  vocabulary: ['wire'],
  address: [],
  log: [],
  'rate-limited-log': ['log'],
  clock: [],
  duration: [],
  'build-info': [],
  wire: ['address'],
  buckets: ['wire', 'vocabulary', 'address'],
  cluster: ['buckets', 'wire', 'vocabulary', 'clock', 'duration'],
  control: ['wire', 'cluster', 'vocabulary', 'address', 'log', 'rate-limited-log', 'clock', 'duration'],
  dataplane: [
    'buckets',
    'wire',
    'vocabulary',
    'address',
    'log',
    'rate-limited-log',
    'clock',
    'duration',
    'native-free-shims',
  ],
  config: ['vocabulary', 'address', 'duration', 'cluster', 'warmup', 'dataplane/settings.js'],
  state: ['buckets', 'address', 'cluster', 'clock', 'log'],
  warmup: ['buckets', 'wire', 'cluster', 'vocabulary', 'log', 'rate-limited-log', 'duration'],
  admin: ['cluster', 'dataplane', 'buckets', 'wire', 'vocabulary', 'address', 'log', 'clock', 'duration'],
  cli: ['admin', 'config', 'daemon', 'log', 'build-info'],
};
// 'daemon' (src/daemon.ts and its own folder src/daemon/) is the composition root: it may import every room.
const ROOMS = [...Object.keys(HOUSE), 'daemon', 'native-free-shims'];
// Inside src/dataplane/ (its own section there): no backend imports another, nor the entry point; the shared
// plumbing (kernel/) and the interface files import no backend, and the interface files nothing of kernel/ but the
// nft language explain() reads.
const BACKENDS = ['nft/', 'ingress/', 'userland/', 'none.js', 'index.js'];
const DATAPLANE = {
  'kernel/*.ts': BACKENDS,
  'nft/*.ts': BACKENDS.filter((b) => b !== 'nft/'),
  'ingress/*.ts': BACKENDS.filter((b) => b !== 'ingress/'),
  'userland/*.ts': BACKENDS.filter((b) => b !== 'userland/'),
  '{redirector,errors,settings,views,explain,none}.ts': [...BACKENDS, 'kernel/(?!rules\\.js$)'],
};
const FILE_ROOMS = new Set(['vocabulary', 'address', 'log', 'rate-limited-log', 'clock', 'duration', 'build-info']);
const escape = (s) => s.replaceAll('.', '\\.');
/** A regex for an import of `room` (all of it but the file `except`) from a file `depth` folders below src/. */
function roomImport(room, depth, except) {
  // native-free-shims/ stands beside src/, one folder further up.
  const ups = room === 'native-free-shims' ? depth + 1 : depth;
  const up = ups === 0 ? '\\./' : `(\\.\\./){${ups}}`;
  return `^${up}${escape(room)}${except === undefined ? '(/|\\.js$)' : `/(?!${escape(except)}$)`}`;
}
/** The no-restricted-imports patterns of `room`'s files `depth` folders below src/. */
function floors(room, depth) {
  const allowed = HOUSE[room];
  return ROOMS.filter((r) => r !== room && !allowed.includes(r)).map((r) => ({
    regex: roomImport(r, depth, allowed.find((a) => a.startsWith(`${r}/`))?.slice(r.length + 1)),
    message: `the house (docs/architecture.md): ${room} imports ${allowed.join(', ') || 'nothing'} of ours, not ${r}`,
  }));
}
const houseRule = (patterns) => ({ 'no-restricted-imports': ['error', { patterns }] });
const houseConfigs = [
  ...Object.keys(HOUSE).flatMap((room) =>
    FILE_ROOMS.has(room)
      ? [{ files: [`src/${room}.ts`], rules: houseRule(floors(room, 0)) }]
      : [1, 2, 3].map((depth) => ({
          files: [`src/${room}/${'*/'.repeat(depth - 1)}*.ts`],
          rules: houseRule(floors(room, depth)),
        })),
  ),
  ...Object.entries(DATAPLANE).map(([files, banned]) => {
    const depth = files.includes('/') ? 2 : 1;
    return {
      files: [`src/dataplane/${files}`],
      rules: houseRule([
        ...floors('dataplane', depth),
        ...banned.map((b) => ({
          regex: `^${depth === 1 ? '\\./' : '\\.\\./'}${b.endsWith('/') || b.includes('(') ? b : escape(b) + '$'}`,
          message: `the data plane (docs/architecture.md, "Inside src/dataplane/"): src/dataplane/${files} does not import ${b}`,
        })),
      ]),
    };
  }),
];

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'test/artifacts/', 'var/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        URL: 'readonly',
        setImmediate: 'readonly',
        clearImmediate: 'readonly',
        fetch: 'readonly',
        AbortController: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        performance: 'readonly',
        structuredClone: 'readonly',
        document: 'readonly',
        window: 'readonly',
        EventSource: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-constant-condition': ['error', { checkLoops: false }],
      // Prettier wraps code at 120 (npm run format); comments are wrapped by hand, strings are left whole (grep-able).
      'max-len': [
        'error',
        { code: 120, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreRegExpLiterals: true, ignoreUrls: true },
      ],
    },
  },
  ...houseConfigs,
  {
    // The web page's script runs in the browser (tsconfig.page.json checks its types).
    files: ['src/admin/page/**/*.js'],
    languageOptions: {
      sourceType: 'script',
      globals: {
        location: 'readonly',
        history: 'readonly',
        URLSearchParams: 'readonly',
        HTMLSelectElement: 'readonly',
      },
    },
  },
);
