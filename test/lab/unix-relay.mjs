#!/usr/bin/env node
// Runs inside a namespace: accepts on a Unix socket (a file, so reachable from the host's network namespace) and
// relays each connection to host:port inside this namespace. With host-relay.ts this makes a daemon's admin port
// in the gateway namespace reachable from the host.
//   node unix-relay.mjs <socket path> <host> <port>
import { createServer, connect } from 'node:net';
import { rmSync } from 'node:fs';

const [path, host = '127.0.0.1', port = '8080'] = process.argv.slice(2);
if (!path) {
  process.stderr.write('usage: unix-relay.mjs <socket path> <host> <port>\n');
  process.exit(2);
}
rmSync(path, { force: true });
const sockets = new Set();
const server = createServer((down) => {
  const up = connect(Number(port), host);
  sockets.add(down).add(up);
  const end = () => {
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
server.listen(path, () => process.stdout.write(`listening ${path} -> ${host}:${port}\n`));
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    for (const s of sockets) s.destroy();
    server.close(() => {
      rmSync(path, { force: true });
      process.exit(0);
    });
  });
}
