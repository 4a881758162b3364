// Fills the conntrack table of the namespace it runs in with N established TCP flows, for the scale bench: one bare
// ACK per flow from this host's `source` to `destination` (distinct ports), sent with a raw socket. Conntrack picks a
// mid-stream ACK up as an ESTABLISHED connection (nf_conntrack_tcp_loose, on by default), and the entry stays for the
// established timeout (days). The destination must be routed to a neighbour that drops the frames (a static
// neighbour entry with a MAC nobody has), so no answer ever ends the flows.
// Usage (in the namespace): node --import tsx bench/conntrack-fill.ts SOURCE DESTINATION COUNT
// Prints one JSON line: {sent, errors}.
import { loadPacketIo } from '../src/dataplane/userland/native.js';

const IPPROTO_RAW = 255;

function checksum(buf: Buffer, start: number, end: number, initial = 0): number {
  let sum = initial;
  for (let i = start; i + 1 < end; i += 2) sum += buf.readUInt16BE(i);
  if ((end - start) % 2 === 1) sum += (buf[end - 1] ?? 0) << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

const addr = (s: string): number[] => s.split('.').map(Number);

/** An IPv4 + TCP packet with ACK set, no payload, checksums filled in. */
export function ackPacket(source: string, destination: string, sport: number, dport: number, seq: number): Buffer {
  const b = Buffer.alloc(40);
  b[0] = 0x45;
  b.writeUInt16BE(40, 2);
  b[8] = 64;
  b[9] = 6;
  Buffer.from(addr(source)).copy(b, 12);
  Buffer.from(addr(destination)).copy(b, 16);
  b.writeUInt16BE(checksum(b, 0, 20), 10);
  b.writeUInt16BE(sport, 20);
  b.writeUInt16BE(dport, 22);
  b.writeUInt32BE(seq >>> 0, 24);
  b.writeUInt32BE(1, 28);
  b[32] = 0x50; // data offset 5 words
  b[33] = 0x10; // ACK
  b.writeUInt16BE(0xffff, 34);
  // Pseudo-header: source, destination, zero + protocol, TCP length.
  const pseudo = Buffer.alloc(12);
  b.copy(pseudo, 0, 12, 20);
  pseudo[9] = 6;
  pseudo.writeUInt16BE(20, 10);
  const partial = ~checksum(pseudo, 0, 12) & 0xffff;
  b.writeUInt16BE(checksum(b, 20, 40, partial), 36);
  return b;
}

async function main(): Promise<void> {
  const [source, destination, countText] = process.argv.slice(2);
  const count = Number(countText);
  if (source === undefined || destination === undefined || !Number.isInteger(count) || count < 1 || count > 1_000_000) {
    throw new Error('usage: conntrack-fill.ts SOURCE DESTINATION COUNT (1..1000000)');
  }
  const io = await loadPacketIo({ prefer: 'native' });
  if (!io.native) throw new Error(`needs the native raw-socket addon: ${io.reason}`);
  const socket = io.rawSocket.createSocket({ protocol: IPPROTO_RAW });
  let sent = 0;
  let errors = 0;
  let done = 0;
  // 50,000 source ports per destination port: distinct 5-tuples, so distinct conntrack entries.
  const perPort = 50_000;
  await new Promise<void>((resolve) => {
    let next = 0;
    const pump = (): void => {
      // A bounded number in flight: the addon queues every send until the socket is writable.
      while (next < count && next - done < 512) {
        const i = next++;
        const p = ackPacket(source, destination, 1024 + (i % perPort), 20000 + Math.floor(i / perPort), i * 7919);
        socket.send(p, 0, p.length, destination, null, (err) => {
          done++;
          if (err === null) sent++;
          else errors++;
          if (done === count) resolve();
          else if (next - done < 256) pump();
        });
      }
    };
    pump();
  });
  socket.close();
  console.log(JSON.stringify({ sent, errors }));
}

main().catch((e: unknown) => {
  console.log(JSON.stringify({ error: (e as Error).message }));
  process.exit(1);
});
