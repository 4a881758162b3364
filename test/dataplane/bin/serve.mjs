// Runs inside a test namespace: a TCP server that answers every connection with its name and closes.
// Usage: node serve.mjs NAME PORT. Prints "listening" once bound.
import net from 'node:net';

const [name = 'server', port = '80'] = process.argv.slice(2);
const server = net.createServer((s) => { s.on('error', () => {}); s.end(`${name}\n`); });
server.listen(Number(port), '0.0.0.0', () => console.log('listening'));
