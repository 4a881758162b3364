// Runs inside a test namespace: holds one TCP connection open. Sends "hold", then one line per stdin line; prints
// every line the server sends, and "error CODE" or "end" when the connection ends.
// Usage: node hold.mjs HOST PORT [LOCAL_PORT]
import net from 'node:net';
import readline from 'node:readline';

const [host = '127.0.0.1', port = '80', localPort] = process.argv.slice(2);
const from = localPort !== undefined ? { localPort: Number(localPort) } : {};
const s = net.connect({ host, port: Number(port), ...from }, () => s.write('hold\n'));
readline
  .createInterface({ input: s })
  .on('line', (l) => console.log(l))
  .on('error', () => {});
s.on('error', (e) => {
  console.log(`error ${e.code ?? e}`);
  process.exit(0);
});
s.on('end', () => {
  console.log('end');
  process.exit(0);
});
readline.createInterface({ input: process.stdin }).on('line', (l) => s.write(`${l}\n`));
