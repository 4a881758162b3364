// Does this kernel have nftables flowtables (nf_flow_table: the software fast path that moves an established flow's
// packets from the ingress hook straight to the output device, past prerouting, routing and forward)? Asked with
// `nft --check`: nft sends a transaction that declares a flowtable in a table of its own and the kernel validates and
// aborts it, so nothing is created, in the gateway's namespace, as the hardened unit allows. A kernel without the
// feature answers ENOENT ("No such file or directory") for the flowtable.
import type { Exec } from '../kernel/exec.js';
import type { FastPathStatus } from '../redirector.js';

const PROBE = [
  'table inet wccpd_flowtable_probe {',
  ' flowtable probe {',
  '  hook ingress priority filter',
  '  devices = { lo }',
  ' }',
  '}',
  '',
].join('\n');

export async function probeFlowtable(exec: Exec): Promise<FastPathStatus> {
  try {
    await exec('nft', ['--check', '-f', '-'], PROBE);
  } catch (e) {
    const stderr = (e as { stderr?: string }).stderr ?? (e as Error).message;
    const missing = /No such file or directory|not supported|Operation not supported/i.test(stderr);
    return {
      flowtable: false,
      used: false,
      detail: missing
        ? 'software fast path unavailable: this kernel has no nftables flowtable support (nf_flow_table); ' +
          'established flows take the normal forward path'
        : `software fast path unavailable: the flowtable check failed (${stderr.split('\n')[0] ?? ''})`,
    };
  }
  return {
    flowtable: true,
    used: false,
    detail:
      'the kernel has nftables flowtables; wccpd does not offload to them yet (per-engine counters and the ' +
      "reset of a gone engine's flows need every packet in the forward path; docs/dataplane.md)",
  };
}
