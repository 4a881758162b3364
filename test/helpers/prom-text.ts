// A strict reader of the Prometheus text exposition format (version 0.0.4), enough to prove /metrics parses:
// every line is a HELP, a TYPE or a sample; names and labels are well formed; every sample belongs to a declared
// family (histograms: _bucket/_sum/_count); values are numbers. Throws naming the line on anything else.

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(text: string, line: number): number {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  const v = Number(text);
  if (text === '' || Number.isNaN(v)) throw new Error(`line ${line}: value ${JSON.stringify(text)} is not a number`);
  return v;
}

function parseLabels(text: string, line: number): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf('=', i);
    if (eq < 0) throw new Error(`line ${line}: label without '='`);
    const name = text.slice(i, eq).trim();
    if (!LABEL.test(name)) throw new Error(`line ${line}: bad label name ${JSON.stringify(name)}`);
    if (text[eq + 1] !== '"') throw new Error(`line ${line}: label ${name} value is not quoted`);
    let j = eq + 2;
    let value = '';
    while (j < text.length && text[j] !== '"') {
      if (text[j] === '\\') {
        const next = text[j + 1];
        if (next === 'n') value += '\n';
        else if (next === '\\' || next === '"') value += next;
        else throw new Error(`line ${line}: bad escape in label ${name}`);
        j += 2;
      } else value += text[j++];
    }
    if (text[j] !== '"') throw new Error(`line ${line}: unterminated label value`);
    if (name in labels) throw new Error(`line ${line}: duplicate label ${name}`);
    labels[name] = value;
    i = j + 1;
    if (text[i] === ',') i++;
    else if (i < text.length) throw new Error(`line ${line}: expected ',' between labels`);
  }
  return labels;
}

export function parsePrometheusText(text: string): { types: Map<string, string>; samples: Sample[] } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  const family = (name: string) => {
    if (types.has(name)) return name;
    for (const suffix of ['_bucket', '_sum', '_count', '_total']) {
      const base = name.endsWith(suffix) ? name.slice(0, -suffix.length) : null;
      if (base !== null && types.has(base)) return base;
    }
    return null;
  };
  text.split('\n').forEach((raw, index) => {
    const n = index + 1;
    const line = raw.trimEnd();
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
      if (!m) return; // other comments are allowed
      const [, kind, name, rest] = m;
      if (!NAME.test(name!)) throw new Error(`line ${n}: bad metric name ${name}`);
      if (kind === 'TYPE') {
        if (!TYPES.has(rest ?? '')) throw new Error(`line ${n}: unknown type ${rest}`);
        if (types.has(name!)) throw new Error(`line ${n}: second TYPE for ${name}`);
        types.set(name!, rest!);
      }
      return;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line);
    if (!m) throw new Error(`line ${n}: not a sample: ${JSON.stringify(line)}`);
    const [, name, labelText, value] = m;
    if (family(name!) === null) throw new Error(`line ${n}: sample ${name} has no TYPE before it`);
    samples.push({ name: name!, labels: parseLabels(labelText ?? '', n), value: parseValue(value!, n) });
  });
  return { types, samples };
}

export function sampleValue(
  samples: readonly Sample[],
  name: string,
  labels: Record<string, string>,
): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}
