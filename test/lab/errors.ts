// Typed lab errors: each says which command or step failed and what it printed, so a failing test is actionable.
export class LabError extends Error {
  override readonly name = 'LabError';
  constructor(
    message: string,
    readonly detail?: { cmd?: string; code?: number | null; stderr?: string },
  ) {
    super(message);
  }
}
