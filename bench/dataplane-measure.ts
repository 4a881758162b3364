// The load tools of the data-path bench, each pinned to a CPU and bounded in time: wrk (requests/s over keep-alive,
// new connections/s with Connection: close), iperf3 (one TCP flow), and a curl loop of sequential short connections
// (latency). Each returns numbers, or throws a BenchError saying what the tool printed.

/** Runs a command in a namespace (the lab's exec, bounded). */
export type NsExec = (
  ns: string,
  cmd: string,
  args: readonly string[],
  opts?: { timeoutMs?: number; allowFail?: boolean },
) => Promise<{ stdout: string; stderr: string; code: number }>;

/**
 * The perf cpu-clock sampling period of the benches that profile (packet-cost, dataplane --perf), in ns: one sample is
 * this much CPU time (perf-diff reads it so). A higher rate slows this nested VM down many times.
 */
export const PERF_PERIOD_NS = 500_000;

export class BenchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BenchError';
  }
}

/** The integer after `flag` in `argv` (min..max), or undefined when the flag is absent; a BenchError otherwise. */
export function intFlag(argv: readonly string[], flag: string, min: number, max: number): number | undefined {
  const at = argv.indexOf(flag);
  if (at < 0) return undefined;
  const v = Number(argv[at + 1]);
  if (!Number.isInteger(v) || v < min || v > max)
    throw new BenchError(`${flag} takes an integer ${min}..${max}; got "${argv[at + 1] ?? ''}"`);
  return v;
}

export interface WrkResult {
  readonly requestsPerSecond: number;
  readonly requests: number;
  /** Socket errors (connect + read + write + timeout) and non-2xx answers: should be 0. */
  readonly errors: number;
}

/** Parses wrk's summary. */
export function parseWrk(out: string): WrkResult {
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  const total = /(\d+) requests in/.exec(out);
  if (rps?.[1] === undefined || total?.[1] === undefined)
    throw new BenchError(`wrk printed no summary:\n${out.slice(0, 800)}`);
  let errors = 0;
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  if (sock !== null) errors += sock.slice(1).reduce((s, v) => s + Number(v), 0);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  if (non2xx?.[1] !== undefined) errors += Number(non2xx[1]);
  return { requestsPerSecond: Number(rps[1]), requests: Number(total[1]), errors };
}

export interface LoadOptions {
  readonly ns: string;
  readonly cpu: number;
  readonly url: string;
  readonly seconds: number;
  readonly connections: number;
  /** New connection per request (Connection: close). */
  readonly close: boolean;
}

export async function runWrk(exec: NsExec, o: LoadOptions): Promise<WrkResult> {
  const args = ['-c', String(o.cpu), 'wrk', '-t1', `-c${o.connections}`, `-d${o.seconds}s`, '--timeout', '2s'];
  if (o.close) args.push('-H', 'Connection: close');
  args.push(o.url);
  const r = await exec(o.ns, 'taskset', args, { timeoutMs: (o.seconds + 10) * 1000, allowFail: true });
  if (r.code !== 0) throw new BenchError(`wrk exit ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`);
  return parseWrk(r.stdout);
}

export interface IperfResult {
  readonly gbitPerSecond: number;
  readonly retransmits: number;
}

interface IperfJson {
  error?: string;
  end?: { sum_received?: { bits_per_second?: number }; sum_sent?: { retransmits?: number } };
}

export function parseIperf(json: string): IperfResult {
  let j: IperfJson;
  try {
    j = JSON.parse(json) as IperfJson;
  } catch {
    throw new BenchError(`iperf3 printed no JSON:\n${json.slice(0, 800)}`);
  }
  if (j.error !== undefined) throw new BenchError(`iperf3: ${j.error}`);
  const bps = j.end?.sum_received?.bits_per_second;
  if (bps === undefined) throw new BenchError('iperf3 reported no received throughput');
  return { gbitPerSecond: bps / 1e9, retransmits: j.end?.sum_sent?.retransmits ?? 0 };
}

export async function runIperf(
  exec: NsExec,
  o: { ns: string; cpu: number; host: string; port: number; seconds: number },
): Promise<IperfResult> {
  const r = await exec(
    o.ns,
    'taskset',
    [
      '-c',
      String(o.cpu),
      'iperf3',
      '-c',
      o.host,
      '-p',
      String(o.port),
      '-t',
      String(o.seconds),
      '--connect-timeout',
      '3000',
      '-J',
    ],
    { timeoutMs: (o.seconds + 15) * 1000, allowFail: true },
  );
  return parseIperf(r.stdout);
}

export interface LatencyResult {
  readonly medianMs: number;
  readonly p99Ms: number;
  readonly samples: number;
  readonly failed: number;
}

/** The q-quantile (0..1) of sorted values, nearest rank. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i] ?? Number.NaN;
}

/** Parses one `<http_code> <time_total>` line per request. */
export function parseLatency(out: string): LatencyResult {
  const ok: number[] = [];
  let failed = 0;
  for (const line of out.split('\n')) {
    const m = /^(\d{3}) ([\d.]+)$/.exec(line.trim());
    if (m === null) continue;
    if (m[1] === '200') ok.push(Number(m[2]) * 1000);
    else failed++;
  }
  ok.sort((a, b) => a - b);
  return { medianMs: quantile(ok, 0.5), p99Ms: quantile(ok, 0.99), samples: ok.length, failed };
}

/**
 * `count` sequential requests from one curl process, each on a new connection (Connection: close): connect, request,
 * response, close. The time includes curl's own work, which is the same on every path.
 */
export async function runLatency(
  exec: NsExec,
  o: { ns: string; cpu: number; url: string; count: number },
): Promise<LatencyResult> {
  const args = [
    '-c',
    String(o.cpu),
    'curl',
    '-s',
    '--noproxy',
    '*',
    '--max-time',
    '2',
    '-H',
    'Connection: close',
    '-w',
    '%{http_code} %{time_total}\\n',
  ];
  for (let i = 0; i < o.count; i++) args.push('-o', '/dev/null', o.url);
  const r = await exec(o.ns, 'taskset', args, { timeoutMs: o.count * 2000 + 5000, allowFail: true });
  const res = parseLatency(r.stdout);
  if (res.samples === 0) throw new BenchError(`curl got no answer (exit ${r.code}): ${r.stderr.slice(0, 300)}`);
  return { ...res, failed: res.failed + Math.max(0, o.count - res.samples - res.failed) };
}
