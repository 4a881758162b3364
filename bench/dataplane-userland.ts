// Runs inside the gateway namespace for the data-path bench: the userland backend (native pcap + raw sockets) with
// the service given as JSON in argv[2]. Prints one JSON line {ready, native, reason} once the service is applied, and
// on SIGTERM stops the backend (removing its kernel guard) and prints {stats, engines} before exiting.
import type { ServiceRedirect } from '../src/dataplane/redirector.js';
import { createUserlandBackend } from '../src/dataplane/userland/userland.js';

async function main(): Promise<void> {
  const service = JSON.parse(process.argv[2] ?? '') as ServiceRedirect;
  const redirector = createUserlandBackend({ prefer: 'native' });
  let stopping = false;
  const stop = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    const c = await redirector.counters();
    const engines = Object.fromEntries(c.engines.get(service.serviceId) ?? new Map());
    const s = redirector.stats();
    await redirector.stop();
    console.log(
      JSON.stringify({
        stopped: true,
        engines,
        bypassed: s.bypassed,
        sendErrors: s.sendErrors,
        segmented: s.segmented,
        segments: s.segments,
        oversizeDropped: Object.values(s.oversizeDropped).reduce((a, b) => a + b, 0),
      }),
    );
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => void stop());
  await redirector.start();
  const io = redirector.packetIo();
  if (io?.native !== true) {
    console.log(JSON.stringify({ ready: false, native: false, reason: io?.reason }));
    await redirector.stop();
    process.exit(0);
  }
  await redirector.apply(service);
  console.log(JSON.stringify({ ready: true, native: true, reason: io.reason }));
}

main().catch((e: unknown) => {
  console.log(JSON.stringify({ ready: false, native: null, reason: (e as Error).message }));
  process.exit(1);
});
