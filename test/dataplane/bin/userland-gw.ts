// The gateway side of the userland namespace tests, run inside the gw namespace by test/dataplane/userland-gw.ts:
// the userland backend with the native addons applies the service from WCCPD_USERLAND_SERVICE, prints {ready},
// on "stats" on stdin prints its stats(), on "restored" its restored(), on "log" {log: the messages logged so far},
// and on "stop" prints {engines, buckets, stats} and removes everything it installed.
import { createInterface } from 'node:readline';
import { createUserlandBackend } from '../../../src/dataplane/userland/userland.js';
import type { ServiceRedirect } from '../../../src/dataplane/redirector.js';
import { recordingLog } from '../../../src/log.js';

const service = JSON.parse(process.env.WCCPD_USERLAND_SERVICE ?? '') as ServiceRedirect;
const log = recordingLog();
const redirector = createUserlandBackend({ prefer: 'native', log });
await redirector.start();
await redirector.apply(service);
const io = redirector.packetIo();
console.log(JSON.stringify({ ready: true, native: io?.native, reason: io?.reason }));
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === 'stats') console.log(JSON.stringify({ ...redirector.stats(), flows: undefined }));
  if (line.trim() === 'restored') console.log(JSON.stringify(redirector.restored()));
  if (line.trim() === 'log') console.log(JSON.stringify({ log: log.lines.map((l) => `${l.level} ${l.msg ?? ''}`) }));
  if (line.trim() !== 'stop') continue;
  const c = await redirector.counters();
  const engines = Object.fromEntries(c.engines.get(service.serviceId) ?? new Map());
  const buckets = (c.buckets.get(service.serviceId) ?? []).map((b) => b.packets);
  const stats = redirector.stats();
  await redirector.stop();
  console.log(JSON.stringify({ engines, buckets, stats: { ...stats, flows: undefined } }));
  break;
}
// A native pcap session that saw no packet keeps Node alive after close() (docs/userland.md): exit explicitly.
process.exit(0);
