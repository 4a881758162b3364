// The bench's side of bench/failover/load.ts: starts it in the client namespace (its own PID, stdin for commands),
// parses its records and answers "when was each watched bucket first served elsewhere".
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, fstatSync, openSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Lab } from '../../test/lab/lab.js';
import { terminate } from '../../test/lab/proc.js';

const LOAD = fileURLToPath(new URL('./load.ts', import.meta.url));
const TSX = import.meta.resolve('tsx');

export interface Request {
  bucket: number;
  start: number;
  end: number;
  status: number;
  engine: string | null;
  error: string | null;
}

export interface LoadOptions {
  fastMs: number;
  slowMs: number;
  timeoutMs: number;
  maxS: number;
}

export class ClientLoad {
  readonly requests: Request[] = [];
  /** bucket -> start time of its first request served elsewhere since the last watch. */
  readonly servedElsewhere = new Map<number, number>();
  /** Most timer lateness of the load generator seen in any one second (its own CPU starvation). */
  lateMostMs = 0;
  private readonly child: ChildProcess;
  private partial = '';
  private readonly file: string;
  private offset = 0;
  private filePartial = '';
  private readonly exited: Promise<void>;

  constructor(
    lab: Lab,
    readonly options: LoadOptions,
  ) {
    this.file = join(lab.dir, 'requests.txt');
    this.child = spawn(
      'ip',
      [
        'netns',
        'exec',
        lab.ns.client,
        process.execPath,
        '--import',
        TSX,
        LOAD,
        '--fast-ms',
        String(options.fastMs),
        '--slow-ms',
        String(options.slowMs),
        '--timeout-ms',
        String(options.timeoutMs),
        '--max-s',
        String(options.maxS),
        '--records',
        this.file,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    this.exited = new Promise((r) => this.child.once('exit', () => r()));
    this.child.stdout?.setEncoding('utf8').on('data', (s: string) => this.read(s));
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  private read(s: string): void {
    this.partial += s;
    const lines = this.partial.split('\n');
    this.partial = lines.pop() ?? '';
    for (const line of lines) {
      const f = line.split(' ');
      if (f[0] === 'w') {
        this.servedElsewhere.set(Number(f[1]), Number(f[2]));
      } else if (f[0] === 'l') {
        this.lateMostMs = Math.max(this.lateMostMs, Number(f[1]));
      }
    }
  }

  /** Asks each bucket every fastMs until an engine other than `engine` answers it. */
  watch(engine: string, buckets: readonly number[]): void {
    for (const b of buckets) this.servedElsewhere.delete(b);
    if (buckets.length > 0) this.child.stdin?.write(`watch ${engine} ${buckets.join(',')}\n`);
  }

  /** Resolves when every bucket was served elsewhere, or at the deadline; returns bucket -> time (absent: never). */
  async waitServed(buckets: readonly number[], deadline: number): Promise<Map<number, number>> {
    while (Date.now() < deadline && !buckets.every((b) => this.servedElsewhere.has(b))) await sleep(50);
    // A last read of records already on their way.
    await sleep(150);
    return new Map(
      buckets.filter((b) => this.servedElsewhere.has(b)).map((b) => [b, this.servedElsewhere.get(b) ?? 0]),
    );
  }

  /** Reads the records the generator appended since the last call. */
  readRecords(): void {
    if (!existsSync(this.file)) return;
    const fd = openSync(this.file, 'r');
    try {
      const size = fstatSync(fd).size;
      if (size <= this.offset) return;
      const buf = Buffer.alloc(size - this.offset);
      readSync(fd, buf, 0, buf.length, this.offset);
      this.offset = size;
      const lines = (this.filePartial + buf.toString('utf8')).split('\n');
      this.filePartial = lines.pop() ?? '';
      for (const line of lines) {
        const f = line.split(' ');
        if (f.length !== 6) continue;
        this.requests.push({
          bucket: Number(f[0]),
          start: Number(f[1]),
          end: Number(f[2]),
          status: Number(f[3]),
          engine: f[4] === '-' ? null : (f[4] ?? null),
          error: f[5] === '-' ? null : (f[5] ?? null),
        });
      }
    } finally {
      closeSync(fd);
    }
  }

  /** Forgets records that ended before `before`. */
  prune(before: number): void {
    this.readRecords();
    const keep = this.requests.filter((r) => r.end >= before);
    this.requests.length = 0;
    this.requests.push(...keep);
  }

  failed(from: number, to: number, buckets?: ReadonlySet<number>): Request[] {
    this.readRecords();
    return this.requests.filter(
      (r) => r.status !== 200 && r.start >= from && r.start < to && (buckets === undefined || buckets.has(r.bucket)),
    );
  }

  async stop(): Promise<void> {
    this.child.stdin?.end('quit\n');
    const timeout = new Promise<'t'>((r) => setTimeout(() => r('t'), this.options.timeoutMs + 1500).unref());
    if ((await Promise.race([this.exited.then(() => 'x' as const), timeout])) === 't' && this.child.pid !== undefined) {
      await terminate([this.child.pid], 1000);
    }
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
