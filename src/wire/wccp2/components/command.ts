// Command Extension (draft 5.6.12): a command (SHUTDOWN from a web cache, SHUTDOWN_RESPONSE from the router) and
// its data behind their own type and length.
import type { Reader } from '../bytes.js';
import { CommandType, ComponentType } from '../constants.js';
import type { CommandExtension } from '../types.js';
import type { ComponentDefs } from './definition.js';
import { putSubBody, subBody } from './elements.js';

function commandExtension(r: Reader): CommandExtension {
  const commandType = r.u16('Command Type');
  const length = r.u16('Command Length');
  const data = subBody(r, length, 'Command Data', (sub) => sub.hex(sub.remaining, 'Command Data'));
  return { kind: 'command-extension', commandType, data };
}

export const COMMAND_COMPONENTS: ComponentDefs<'command-extension'> = {
  'command-extension': {
    type: ComponentType.COMMAND_EXTENSION,
    decode: commandExtension,
    encode(c, w) {
      w.u16(c.commandType, 'Command Type');
      putSubBody(w, 'Command Length', (sub) => sub.hex(c.data, 'Command Data'));
    },
    describe(c) {
      const name =
        c.commandType === CommandType.SHUTDOWN
          ? 'SHUTDOWN'
          : c.commandType === CommandType.SHUTDOWN_RESPONSE
            ? 'SHUTDOWN_RESPONSE'
            : 'unknown command';
      const ip = c.data.length === 8 ? ` ${Buffer.from(c.data, 'hex').join('.')}` : '';
      return [`command ${c.commandType} ${name}${ip} data=0x${c.data}`];
    },
  },
};
