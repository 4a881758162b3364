// Parsing `curl -sS -i` output into what a test asserts on: status, headers, body, and which engine served it.
export interface CurlResult {
  /** HTTP status; 0 when no response arrived (see error). */
  status: number;
  headers: Record<string, string>;
  body: string;
  /** Parsed body when it is JSON (the origin's answer: local, remote, path ...). */
  json?: unknown;
  /** The Squid engine that served the response (visible_hostname, e.g. "engine1"), from X-Cache or Via. */
  engine?: string;
  /** True when the response carries the origin's `X-Origin: 1` header. */
  fromOrigin: boolean;
  /** curl's exit code and message when the request failed (timeout, refused, reset). */
  error?: string;
  curlExit: number;
}

export function parseCurl(stdout: string, stderr: string, code: number): CurlResult {
  if (code !== 0 && stdout.length === 0) {
    return {
      status: 0,
      headers: {},
      body: '',
      fromOrigin: false,
      error: `curl exit ${code}: ${stderr.trim()}`,
      curlExit: code,
    };
  }
  let rest = stdout;
  let head = '';
  // Skip interim responses (100 Continue): take header blocks while the next block starts with HTTP/.
  for (let i = 0; i < 5; i++) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) {
      head = rest;
      rest = '';
      break;
    }
    head = rest.slice(0, end);
    rest = rest.slice(end + 4);
    if (!rest.startsWith('HTTP/')) break;
  }
  const lines = head.split('\r\n');
  const status = Number(/^HTTP\/[\d.]+ (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const result: CurlResult = { status, headers, body: rest, fromOrigin: headers['x-origin'] === '1', curlExit: code };
  if (code !== 0) result.error = `curl exit ${code}: ${stderr.trim()}`;
  const engine = engineFromHeaders(headers);
  if (engine !== undefined) result.engine = engine;
  if ((headers['content-type'] ?? '').startsWith('application/json')) {
    try {
      result.json = JSON.parse(rest);
    } catch {
      /* truncated body: leave json unset */
    }
  }
  return result;
}

/** `X-Cache: MISS from engine1` or `Via: 1.1 engine1 (squid/5.7)`. */
export function engineFromHeaders(headers: Record<string, string>): string | undefined {
  const xc = /\bfrom (\S+)/.exec(headers['x-cache'] ?? '');
  if (xc?.[1]) return xc[1];
  const via = /\d\.\d (\S+) \(squid/i.exec(headers['via'] ?? '');
  return via?.[1];
}

/** One request of lab.curlMany: a status and the headers that say who served it (no body). */
export interface CurlManyResult {
  url: string;
  /** HTTP status; 0 when no response arrived (see error). */
  status: number;
  engine?: string;
  fromOrigin: boolean;
  /** X-Origin-Local / X-Origin-Remote: the origin address reached and who the origin saw (client or engine). */
  originLocal?: string;
  originRemote?: string;
  /** Squid's X-Squid-Error header on an error page it made (e.g. `ERR_ZERO_SIZE_OBJECT 0`). */
  squidError?: string;
  error?: string;
}

const BEGIN = '<<WCCPLAB ';
const END = ' WCCPLAB>>';
/** curl -w format for curlMany: one marked record per URL (a leading '@' would make curl read a file). */
export const CURL_MANY_FORMAT = `${BEGIN}%{exitcode}\t%{http_code}\t%{url}\t%{errormsg}\t%{header_json}${END}\n`;

export function parseCurlMany(stdout: string): CurlManyResult[] {
  const out: CurlManyResult[] = [];
  let at = 0;
  for (;;) {
    const b = stdout.indexOf(BEGIN, at);
    if (b < 0) break;
    const e = stdout.indexOf(END, b);
    if (e < 0) break;
    at = e + END.length;
    const [exit = '', code = '', url = '', errormsg = '', hjson = ''] = stdout.slice(b + BEGIN.length, e).split('\t');
    const headers: Record<string, string> = {};
    try {
      const parsed = JSON.parse(hjson.trim() || '{}') as Record<string, string[]>;
      for (const [k, v] of Object.entries(parsed)) headers[k.toLowerCase()] = v[v.length - 1] ?? '';
    } catch {
      /* no headers */
    }
    const r: CurlManyResult = { url, status: Number(code) || 0, fromOrigin: headers['x-origin'] === '1' };
    const engine = engineFromHeaders(headers);
    if (engine !== undefined) r.engine = engine;
    if (headers['x-origin-local']) r.originLocal = headers['x-origin-local'];
    if (headers['x-origin-remote']) r.originRemote = headers['x-origin-remote'];
    if (headers['x-squid-error']) r.squidError = headers['x-squid-error'];
    if (exit !== '0') r.error = `curl exit ${exit}: ${errormsg}`;
    out.push(r);
  }
  return out;
}
