// The thin layer that runs `nft` and `ip`, optionally inside a network namespace (tests; the daemon itself runs in
// the gateway's namespace), with a timeout. A failure is a typed DataplaneError carrying the command's stderr.
import { spawn } from 'node:child_process';
import { DataplaneError } from '../errors.js';

export interface ExecOptions {
  /** Run every command inside this network namespace (`ip netns exec NAME ...`). */
  readonly netns?: string;
  /** Per command; default 10 s. */
  readonly timeoutMs?: number;
}

/** Runs `cmd args` with `input` on stdin and resolves with stdout; rejects with a DataplaneError. */
export type Exec = (cmd: 'nft' | 'ip', args: readonly string[], input?: string) => Promise<string>;

export function createExec(options: ExecOptions = {}): Exec {
  const timeoutMs = options.timeoutMs ?? 10_000;
  return (cmd, args, input) => {
    const argv = options.netns !== undefined ? ['netns', 'exec', options.netns, cmd, ...args] : [...args];
    const file = options.netns !== undefined ? 'ip' : cmd;
    const line = `${options.netns !== undefined ? `ip netns exec ${options.netns} ` : ''}${cmd} ${args.join(' ')}`;
    return new Promise<string>((resolve, reject) => {
      const child = spawn(file, argv, { stdio: ['pipe', 'pipe', 'pipe'] });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        child.kill('SIGKILL');
      }, timeoutMs);
      child.stdout.on('data', (b: Buffer) => out.push(b));
      child.stderr.on('data', (b: Buffer) => err.push(b));
      child.on('error', (e) => {
        clearTimeout(timer);
        reject(new DataplaneError('command-failed', `cannot run ${cmd}: ${e.message} (is ${cmd} installed?)`, line));
      });
      child.on('close', (code) => {
        clearTimeout(timer);
        const stderr = Buffer.concat(err).toString('utf8').trim();
        if (timedOut) {
          reject(new DataplaneError('command-timeout', `${line} did not finish within ${timeoutMs} ms`, line, stderr));
        } else if (code !== 0) {
          reject(
            new DataplaneError(
              'command-failed',
              `${line} failed (exit ${code}): ${firstLines(stderr)}`,
              line,
              stderr,
              Buffer.concat(out).toString('utf8'),
            ),
          );
        } else {
          resolve(Buffer.concat(out).toString('utf8'));
        }
      });
      child.stdin.on('error', () => {
        /* the close handler reports the failure */
      });
      child.stdin.end(input ?? '');
    });
  };
}

function firstLines(s: string, n = 3): string {
  return s.split('\n').slice(0, n).join(' | ');
}
