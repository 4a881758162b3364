// Typed data-plane errors: each says what failed and what a person can do about it.

export type DataplaneErrorReason =
  | 'command-failed' // nft or ip exited non-zero; stderr says why
  | 'command-timeout' // nft or ip did not finish in time
  | 'missing-kernel-feature'
  | 'engine-not-attached' // L2 forwarding needs the engine on a directly attached segment
  | 'unsupported-service' // a service the backend cannot express
  | 'not-started';

export class DataplaneError extends Error {
  override readonly name = 'DataplaneError';
  constructor(
    readonly reason: DataplaneErrorReason,
    message: string,
    /** The command line that failed, when one did. */
    readonly command?: string,
    /** The command's stderr, verbatim. */
    readonly stderr?: string,
    /** Its stdout, where a failed command printed some (an `ip -force -batch` whose other lines worked). */
    readonly stdout?: string,
  ) {
    super(message);
  }
}
