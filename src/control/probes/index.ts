// Active health probes: the probers (the only code that probes engines over sockets) and their scheduler.
export { ProbeScheduler } from './scheduler.js';
export type { ProbeSchedulerOptions, ProbeTarget } from './scheduler.js';
export { tcpProber } from './tcp.js';
export { httpProber, httpProbeRequest, checkHead, HTTP_PROBE_URL } from './http.js';
export type { HeadCheck } from './http.js';
export { raceConnect, isHardError } from './connect.js';
export { icpProber, ICP_PROBE_URL } from './icp.js';
export type { IcpProberOptions } from './icp.js';
export { openIcmpProber, echoRequest, icmpChecksum } from './icmp.js';
export type { IcmpProber, IcmpProberResult } from './icmp.js';
export { createProbers } from './probers.js';
export type { Probers } from './probers.js';
export type { Prober } from './types.js';
