#!/usr/bin/env node
// Run inside an engine's namespace: sends ICP_QUERYs (RFC 2186, version 2) for each URL of a file to the broker, one
// at a time, and prints one JSON object: the round trip of each answer in ms and the answers' opcodes by count.
//   node icp-timing.mjs <url-file> <broker-address> <port> <bind-address>
import { createSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';

const [file = '', broker = '', portArg = '3130', bind = '0.0.0.0'] = process.argv.slice(2);
const urls = readFileSync(file, 'utf8')
  .split('\n')
  .filter((l) => l !== '');
const NAMES = { 2: 'HIT', 3: 'MISS', 4: 'ERR', 21: 'MISS_NOFETCH', 22: 'DENIED' };
const socket = createSocket('udp4');
await new Promise((r) => socket.bind(0, bind, r));
const rtts = [];
const opcodes = {};
let waiting = null;
socket.on('message', (m) => {
  if (waiting === null || m.length < 8 || m.readUInt32BE(4) !== waiting.n) return;
  const w = waiting;
  waiting = null;
  w.resolve(m[0]);
});
for (let i = 0; i < urls.length; i++) {
  const url = Buffer.from(`${urls[i]}\0`);
  const q = Buffer.alloc(24 + url.length);
  q.writeUInt8(1, 0);
  q.writeUInt8(2, 1);
  q.writeUInt16BE(q.length, 2);
  q.writeUInt32BE(i + 1, 4);
  url.copy(q, 24);
  const start = process.hrtime.bigint();
  const op = await new Promise((resolve) => {
    const timer = setTimeout(() => {
      waiting = null;
      resolve(-1);
    }, 2000);
    waiting = {
      n: i + 1,
      resolve: (o) => {
        clearTimeout(timer);
        resolve(o);
      },
    };
    socket.send(q, Number(portArg), broker);
  });
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  const name = op === -1 ? 'timeout' : (NAMES[op] ?? String(op));
  opcodes[name] = (opcodes[name] ?? 0) + 1;
  if (op !== -1) rtts.push(ms);
}
socket.close();
process.stdout.write(JSON.stringify({ rtts, opcodes }) + '\n');
