// An engine's ICP query to the warm-up broker, as Squid sends one (bench/warmup-relay's client, bench/failover's relay
// load): from `local`, for `url`; resolves with the reply's opcode (2 HIT, 3 MISS, ...) or null after `timeoutMs`.
import { createSocket } from 'node:dgram';

export function askIcp(local, broker, port, url, requestNumber, timeoutMs) {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    const u = Buffer.from(`${url}\0`);
    // ICP_OP_QUERY, version 2, length, request number, options, option data, sender, then the requester and the URL.
    const q = Buffer.alloc(24 + u.length);
    q[0] = 1;
    q[1] = 2;
    q.writeUInt16BE(q.length, 2);
    q.writeUInt32BE(requestNumber >>> 0, 4);
    u.copy(q, 24);
    const done = (opcode) => {
      clearTimeout(t);
      s.close();
      resolve(opcode);
    };
    const t = setTimeout(() => done(null), timeoutMs);
    s.on('message', (r) => done(r[0] ?? null));
    s.on('error', () => done(null));
    s.bind(0, local, () => s.send(q, port, broker));
  });
}
