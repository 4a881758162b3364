// The one error the buckets layer throws: bad input from the caller (a bug or a bad config upstream), never a runtime
// condition. `reason` is machine-friendly; the message says what to fix.

export type BucketsErrorReason =
  'bad-address' | 'duplicate-engine' | 'bad-weight' | 'bad-priority' | 'too-many-engines' | 'bad-table' | 'bad-mask';

export class BucketsError extends Error {
  override readonly name = 'BucketsError';
  constructor(
    readonly reason: BucketsErrorReason,
    message: string,
  ) {
    super(message);
  }
}
