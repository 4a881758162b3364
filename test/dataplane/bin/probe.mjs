// Runs inside a test namespace: reads "HOST PORT TIMEOUT_MS [LOCAL_ADDRESS]" lines, connects, and writes one JSON line
// per request:
// {"host","ok","data","code","ms"}. Requests are handled one at a time, in order.
import net from 'node:net';
import readline from 'node:readline';

function probe(host, port, timeoutMs, localAddress) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const s = net.connect({ host, port, ...(localAddress ? { localAddress } : {}) }, () => s.write('once\n'));
    let data = '';
    const done = (ok, code) => {
      s.destroy();
      clearTimeout(timer);
      resolve({ host, ok, data: data.trim(), code, ms: Date.now() - t0 });
    };
    const timer = setTimeout(() => done(false, 'TIMEOUT'), timeoutMs);
    s.on('data', (b) => {
      data += b.toString();
    });
    s.on('end', () => done(true, null));
    s.on('error', (e) => done(false, e.code ?? String(e)));
  });
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const [host, port, timeout, local] = line.trim().split(/\s+/);
  if (!host) continue;
  const r = await probe(host, Number(port), Number(timeout), local);
  process.stdout.write(`${JSON.stringify(r)}\n`);
}
