// A process with wccpd's last line installed, for test/cli/last-line.test.ts: `throw` throws from a timer's callback,
// `reject` leaves a promise rejected with nothing to catch it.
import { createLog } from '../../src/log.js';
import { installLastLine } from '../../src/cli/process-boundary.js';

installLastLine(createLog());
const how = process.argv[2];
setTimeout(() => {
  if (how === 'throw') throw new Error('boom in a timer');
  void Promise.reject(new Error('boom in a promise'));
}, 10);
// Would keep the process alive for a minute if the last line did not end it.
setTimeout(() => undefined, 60_000);
