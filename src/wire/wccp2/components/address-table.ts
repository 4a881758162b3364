// Address Table (v2r1, type 17): a family (1 IPv4, 2 IPv6), an address length and the addresses. Decoded as it
// stands; the address fields elsewhere that index into it are not resolved (docs/wire.md).
import { fail, Wccp2EncodeError, type Reader, type Writer } from '../bytes.js';
import { ComponentType } from '../constants.js';
import type { AddressTable } from '../types.js';
import type { ComponentDefs } from './definition.js';

function addressTable(r: Reader): AddressTable {
  const family = r.u16('Address Family');
  const lenAt = r.pos;
  const addressLength = r.u16('Address Length');
  const expected = family === 1 ? 4 : family === 2 ? 16 : null;
  if ((expected !== null && addressLength !== expected) || addressLength === 0) {
    fail(r.where, lenAt, 'bad-length', `address length ${addressLength} for family ${family}`);
  }
  const n = r.count('Number of Addresses', addressLength, null, 'truncated');
  const addresses: string[] = [];
  for (let i = 0; i < n; i++) {
    const b = r.bytes(addressLength, 'Address');
    addresses.push(
      family === 1
        ? b.join('.')
        : family === 2
          ? Array.from({ length: 8 }, (_, k) =>
              (((b[2 * k] as number) << 8) | (b[2 * k + 1] as number)).toString(16),
            ).join(':')
          : Buffer.from(b).toString('hex'),
    );
  }
  return { kind: 'address-table', family, addressLength, addresses };
}

function putAddress(w: Writer, t: AddressTable, a: string): void {
  if (t.family === 1) {
    w.ipv4(a, 'Address');
  } else if (t.family === 2) {
    const groups = a.split(':');
    if (groups.length !== 8 || groups.some((g) => !/^[0-9a-fA-F]{1,4}$/.test(g))) {
      throw new Wccp2EncodeError('Address', `'${a}' is not 8 uncompressed IPv6 hex groups`);
    }
    for (const g of groups) w.u16(parseInt(g, 16), 'Address');
  } else {
    w.hex(a, 'Address', t.addressLength);
  }
}

export const ADDRESS_TABLE_COMPONENTS: ComponentDefs<'address-table'> = {
  'address-table': {
    type: ComponentType.ADDRESS_TABLE,
    decode: addressTable,
    encode(c, w) {
      w.u16(c.family, 'Address Family');
      w.u16(c.addressLength, 'Address Length');
      w.u32(c.addresses.length, 'Number of Addresses');
      for (const a of c.addresses) putAddress(w, c, a);
    },
    describe: (c) => [
      `family=${c.family}, address length=${c.addressLength}, ${c.addresses.length} addresses:` +
        ` ${c.addresses.map((a, i) => `${i + 1}=${a}`).join(' ')}`,
    ],
  },
};
