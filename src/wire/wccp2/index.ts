// Public API of the WCCPv2 codec: pure functions over bytes. Decoders return Decoded<T> and never throw; encoders
// throw Wccp2EncodeError / Wccp2PasswordError for values the wire cannot carry.
export {
  decodeMessage,
  encodeMessage,
  findComponent,
  unknownComponents,
  componentName,
  REQUIRED_COMPONENTS,
} from './message.js';
export type { EncodeOptions } from './message.js';
export {
  signMessage,
  verifyMessage,
  md5DigestOffset,
  paddedPassword,
  Wccp2PasswordError,
  Wccp2NoMd5ComponentError,
} from './security.js';
export { Wccp2EncodeError } from './bytes.js';
export { describeMessage, bucketRanges } from './describe.js';
export * from './constants.js';
export type * from './types.js';
export type { DecodeError, Decoded } from '../decode-error.js';
export { formatDecodeError } from '../decode-error.js';
