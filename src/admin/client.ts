// The HTTP client wccpctl uses: one place that turns "daemon not reachable" into exit 2 naming the URL.

export class Unreachable extends Error {
  constructor(
    readonly url: string,
    cause: string,
  ) {
    super(`cannot reach wccpd at ${url}: ${cause}`);
  }
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly url: string,
    message: string,
  ) {
    super(message);
  }
}

export interface ApiClient {
  readonly base: string;
  get<T>(path: string): Promise<T>;
  post<T>(path: string, body?: unknown): Promise<T>;
  /** Opens the SSE stream and calls onEvent per event until the stream ends or the signal aborts. */
  stream(path: string, onEvent: (data: string) => void, signal?: AbortSignal): Promise<void>;
}

export function createClient(base: string, token: string | undefined, timeoutMs = 5000): ApiClient {
  const root = base.replace(/\/+$/, '');
  const url = (path: string) => `${root}/api/v1/${path}`;

  async function call(method: string, path: string, body?: unknown): Promise<Response> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    try {
      return await fetch(url(path), {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err);
      throw new Unreachable(root, cause);
    }
  }

  async function json<T>(res: Response, path: string): Promise<T> {
    const text = await res.text();
    let parsed: unknown = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      throw new ApiError(res.status, url(path), `${url(path)}: HTTP ${res.status}, not JSON: ${text.slice(0, 200)}`);
    }
    if (!res.ok) {
      // The API's own words when it gives them ({error, message}), else its error code, else the body.
      const body = parsed !== null && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : {};
      const msg = typeof body.message === 'string' ? body.message : 'error' in body ? String(body.error) : text;
      throw new ApiError(res.status, url(path), `HTTP ${res.status}: ${msg}`);
    }
    return parsed as T;
  }

  return {
    base: root,
    async get<T>(path: string) {
      return json<T>(await call('GET', path), path);
    },
    async post<T>(path: string, body?: unknown) {
      return json<T>(await call('POST', path, body ?? {}), path);
    },
    async stream(path, onEvent, signal) {
      let res: Response;
      try {
        res = await fetch(url(path), { headers: { accept: 'text/event-stream' }, signal });
      } catch (err) {
        if (signal?.aborted) return;
        const cause = err instanceof Error && err.cause instanceof Error ? err.cause.message : String(err);
        throw new Unreachable(root, cause);
      }
      if (!res.ok || !res.body) throw new ApiError(res.status, url(path), `HTTP ${res.status} on ${url(path)}`);
      const decoder = new TextDecoder();
      let buffered = '';
      const reader = res.body.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          buffered += decoder.decode(value, { stream: true });
          let end: number;
          while ((end = buffered.indexOf('\n\n')) >= 0) {
            const block = buffered.slice(0, end);
            buffered = buffered.slice(end + 2);
            const data = block
              .split('\n')
              .filter((l) => l.startsWith('data:'))
              .map((l) => l.slice(5).trimStart());
            if (data.length > 0) onEvent(data.join('\n'));
          }
        }
      } catch (err) {
        if (!signal?.aborted) throw err;
      }
    },
  };
}
