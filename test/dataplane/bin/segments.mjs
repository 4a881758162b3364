// Runs inside a test namespace: sends bare TCP segments (no payload) of 4-tuples no socket owns, from a raw socket
// (the native raw-socket package; IPPROTO_RAW: the headers are ours). Arguments: one segment each,
// "SRC,DST,SPORT,DPORT,FLAGS" (FLAGS: any of F S R P A, e.g. FA for FIN|ACK). Prints "sent N" when every one went.
import rawSocket from 'raw-socket';

const IPPROTO_RAW = 255;
const FLAG_BITS = { F: 0x01, S: 0x02, R: 0x04, P: 0x08, A: 0x10 };

function sum(buf, start, end, initial = 0) {
  let s = initial;
  for (let i = start; i + 1 < end; i += 2) s += buf.readUInt16BE(i);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

function segment(src, dst, sport, dport, flags) {
  const b = Buffer.alloc(40);
  b[0] = 0x45;
  b.writeUInt16BE(40, 2);
  b[8] = 64;
  b[9] = 6;
  Buffer.from(src.split('.').map(Number)).copy(b, 12);
  Buffer.from(dst.split('.').map(Number)).copy(b, 16);
  b.writeUInt16BE(~sum(b, 0, 20) & 0xffff, 10);
  b.writeUInt16BE(sport, 20);
  b.writeUInt16BE(dport, 22);
  b.writeUInt32BE(1000, 24);
  b.writeUInt32BE(flags.includes('A') ? 5000 : 0, 28);
  b[32] = 0x50;
  b[33] = [...flags].reduce((a, f) => a | (FLAG_BITS[f] ?? 0), 0);
  b.writeUInt16BE(0xffff, 34);
  // The pseudo-header's sum: addresses, protocol, TCP length.
  const pseudo = sum(b, 12, 20, 6 + 20);
  b.writeUInt16BE(~sum(b, 20, 40, pseudo) & 0xffff, 36);
  return b;
}

const socket = rawSocket.createSocket({ protocol: IPPROTO_RAW });
let sent = 0;
for (const arg of process.argv.slice(2)) {
  const [src, dst, sport, dport, flags] = arg.split(',');
  const p = segment(src, dst, Number(sport), Number(dport), flags);
  await new Promise((resolve, reject) =>
    socket.send(p, 0, p.length, dst, null, (err) => (err ? reject(err) : resolve())),
  );
  sent++;
}
socket.close();
process.stdout.write(`sent ${sent}\n`);
