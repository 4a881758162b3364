// Runs inside a test namespace: a TCP server that answers with its name. The client's first line says how:
// "once" -> name, then close; "hold" -> name, then the name again for every further line, until the client ends.
// Usage: node serve.mjs NAME PORT [HOST]. Prints "listening" once bound. HOST `::` takes both families (dual-stack).
import net from 'node:net';
import readline from 'node:readline';

const [name = 'server', port = '80', host = '0.0.0.0'] = process.argv.slice(2);
const server = net.createServer((s) => {
  s.on('error', () => {});
  let first = true;
  readline
    .createInterface({ input: s })
    .on('error', () => {})
    .on('line', (line) => {
      if (first && line.trim() === 'once') s.end(`${name}\n`);
      else if (!s.writableEnded) s.write(`${name}\n`);
      first = false;
    });
});
server.listen({ port: Number(port), host, ipv6Only: false }, () => console.log('listening'));
