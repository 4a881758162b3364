// Makes a TCP port inside a lab namespace reachable on the host's loopback: a relay in the namespace accepts on a
// Unix socket in the lab dir (files are not namespaced) and connects to the port there; a server in this process
// listens on 127.0.0.1:<hostPort> and connects each client to that socket. Both end with the lab or close().
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Lab } from './lab.js';

const UNIX_RELAY = fileURLToPath(new URL('./unix-relay.mjs', import.meta.url));

export interface HostRelay {
  /** The host port actually listening (hostPort, or the next free one when allowed). */
  readonly port: number;
  readonly url: string;
  /** Ports tried and found taken before `port`, e.g. [8080] when 8080 was in use. */
  readonly taken: readonly number[];
  close(): Promise<void>;
}

export interface HostRelayOptions {
  /**
   * The port in the namespace (on its 127.0.0.1); default the host port the relay got, so a server that checks the
   * Host header (wccpd's admin does) sees its own address and port.
   */
  nsPort?: number;
  /** The port on the host's 127.0.0.1; 0 = any free port. */
  hostPort: number;
  /** When hostPort is taken, try the next ones, up to this many (default 0: fail). */
  tryNext?: number;
}

let relays = 0;

export async function relayToHost(lab: Lab, ns: string, o: HostRelayOptions): Promise<HostRelay> {
  const path = join(lab.dir, `relay-${++relays}.sock`);
  const sockets = new Set<Socket>();
  const taken: number[] = [];
  let server: Server | undefined;
  let port = o.hostPort;
  for (let attempt = 0; attempt <= (o.tryNext ?? 0); attempt++) {
    const s = createServer((down) => {
      const up = connect(path);
      sockets.add(down).add(up);
      const end = (): void => {
        down.destroy();
        up.destroy();
        sockets.delete(down);
        sockets.delete(up);
      };
      down.on('error', end).on('close', end);
      up.on('error', end).on('close', end);
      down.pipe(up);
      up.pipe(down);
    });
    const ok = await new Promise<boolean | Error>((resolve) => {
      s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'EADDRINUSE' ? false : e));
      s.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (ok instanceof Error) throw ok;
    if (ok) {
      server = s;
      break;
    }
    taken.push(port);
    port += 1;
  }
  if (server === undefined)
    throw new Error(`127.0.0.1 port${taken.length > 1 ? 's' : ''} ${taken.join(', ')} taken on the host`);
  const a = server.address();
  const actual = typeof a === 'object' && a ? a.port : port;
  const srv = server;
  const inner = lab.spawn(ns, process.execPath, [UNIX_RELAY, path, '127.0.0.1', String(o.nsPort ?? actual)]);
  try {
    await inner.waitForLine((l) => l.startsWith('listening'), 5000);
  } catch (e) {
    await new Promise<void>((r) => srv.close(() => r()));
    throw e;
  }
  return {
    port: actual,
    url: `http://127.0.0.1:${actual}`,
    taken,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => srv.close(() => r()));
      await inner.stop(1000);
    },
  };
}
