// The one error the config loader throws: every problem found, each naming the key, so an admin fixes them all at once.

export interface ConfigProblem {
  /** The key path, e.g. `services[0].failMode`; `(file)` or `(yaml)` for problems with the file itself. */
  readonly key: string;
  readonly message: string;
  /** 1-based line in the file, when known. */
  readonly line?: number;
}

export function formatProblem(file: string, p: ConfigProblem): string {
  return `${file}: ${p.key}: ${p.message}${p.line === undefined ? '' : ` (line ${p.line})`}`;
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly file: string;
  readonly problems: readonly ConfigProblem[];

  constructor(file: string, problems: readonly ConfigProblem[]) {
    const n = problems.length;
    super(
      `${file}: ${n} configuration problem${n === 1 ? '' : 's'}:\n` +
        problems.map((p) => formatProblem(file, p)).join('\n'),
    );
    this.file = file;
    this.problems = problems;
  }
}
