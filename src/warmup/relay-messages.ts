// What the broker (in the daemon) and its relay process (relay-child.ts) say to each other over the IPC channel. The
// broker accepts each connection, decides whether to take it and hands the socket over; the relay process parses
// the requests, asks the broker about each one and moves the bytes of what the broker lets it relay.

/**
 * The relay's budgets by default (warmup.maxRelayRate, warmup.maxObjectSize). 100 MB/s (800 Mbit/s) costs the relay
 * process under a tenth of a core for large objects (bench/warmup-relay: 0.5-0.75 CPU-s per GB through the pipe)
 * and under a tenth of a 10 GbE engine link (docs/warmup.md, "What a relay costs").
 */
export const DEFAULT_RELAY_BUDGETS = { maxRelayRate: 100_000_000, maxObjectBytes: 256 * 1024 * 1024 } as const;

/** The relay's limits, as the broker has them (broker.ts RelayLimits). */
export interface RelaySettings {
  readonly localAddress: string;
  readonly sourceHttpPort: number;
  readonly maxHeaderBytes: number;
  readonly headersTimeoutMs: number;
  readonly totalTimeoutMs: number;
  readonly maxObjectBytes: number;
  readonly idleKeepAliveMs: number;
  readonly sourceIdleKeepAliveMs: number;
  /** Bytes per second over all relays at once; 0: no limit. */
  readonly maxRelayRate: number;
}

/** The broker's answer to one request. */
export type RequestDecision =
  | {
      readonly action: 'refuse';
      readonly status: number;
      readonly text: string;
      readonly close: boolean;
      readonly extra: Readonly<Record<string, string>>;
    }
  | { readonly action: 'relay'; readonly source: string; readonly url: string; readonly keepAlive: boolean };

export type ToChild =
  | { readonly t: 'init'; readonly settings: RelaySettings }
  | { readonly t: 'settings'; readonly settings: RelaySettings }
  /** Sent with the connection's socket. */
  | { readonly t: 'conn'; readonly conn: number }
  | { readonly t: 'decision'; readonly rid: number; readonly decision: RequestDecision }
  | { readonly t: 'ping'; readonly n: number }
  | { readonly t: 'stop' };

export type FromChild =
  | { readonly t: 'ready' }
  | {
      readonly t: 'request';
      readonly rid: number;
      readonly conn: number;
      readonly method: string;
      readonly url: string;
      readonly contentLength: string | null;
      readonly transferEncoding: boolean;
      readonly via: string | null;
    }
  | { readonly t: 'closed'; readonly conn: number }
  | { readonly t: 'counts'; readonly counts: Readonly<Record<string, number>> }
  /** A line for the broker's logs: `drop` rate-limited per reason (dropLog), `note` per kind (the broker's note). */
  | {
      readonly t: 'log';
      readonly via: 'drop' | 'note';
      readonly key: string;
      readonly from: string;
      readonly obj: Readonly<Record<string, unknown>>;
      readonly msg: string;
    }
  | { readonly t: 'source-failed'; readonly source: string }
  | { readonly t: 'pong'; readonly n: number };
