// The relay's connections to a source, and the pipe that moves a large object's body (docs/warmup.md, "What a
// relay costs"). Node's HTTP client reads 64 KiB a time into a fresh buffer, and its parser copies every body byte
// once more (into the Buffer it pushes to the response stream): measured, that copy alone was 11% of the relay
// process's time, the reads and writes of 64 KiB most of the rest. So a source's socket reads into buffers the
// relay chooses (net's `onread`): up to the response's headers, and for a small object, what it reads goes to Node's
// client as if read by Node (a fresh buffer each time: its parser may keep it); once a large object's headers are
// through, its body goes straight from a few reused buffers of 256 KiB to the engine's socket, nothing copied in
// between and a quarter of the system calls. The source's connection is then closed after the body (the parser did
// not see it, so the connection cannot be reused); for an object this large one new connection costs little.
import { Agent } from 'node:http';
import type { ClientRequestArgs, IncomingMessage, ServerResponse } from 'node:http';
import { createConnection } from 'node:net';
import type { NetConnectOpts, Socket } from 'node:net';

/** An object's body goes through the pipe from this size on (Content-Length); a smaller one through Node's client. */
export const PIPE_MIN_BYTES = 256 * 1024;
/** Each read: a whole socket buffer's worth on loopback, where the source is far ahead of the engine. */
const PIPE_BUFFER_BYTES = 256 * 1024;
/** Buffers per pipe: one being read into while the other is written. */
const PIPE_BUFFERS = 2;
/** What Node's own reads take (and what it hands its HTTP client). */
const HEAD_READ_BYTES = 64 * 1024;

/** What a pipe needs from the relay around it. */
export interface PipeHooks {
  /** Counts `bytes` relayed and takes them from the relays' rate; returns the milliseconds to wait (0: go on). */
  moved(bytes: number): number;
  /** A read held for the rate (`http-rate-waits`). */
  waited(): void;
  /** The most to read at once, up to `max` (a low rate reads less at a time). */
  readSize(max: number): number;
  /** The whole body is written to the engine: the source's connection is closed next. */
  ended(): void;
}

/** Where a source's socket puts what it reads: Node's HTTP client until a pipe takes over. */
class SourceReads {
  socket: Socket | null = null;
  pipe: BodyPipe | null = null;

  read(n: number, buf: Buffer): boolean {
    if (this.pipe !== null) return this.pipe.read(n, buf);
    // Node's client, as if Node had read it: its parser runs (and may start a pipe) within this emit.
    this.socket?.emit('data', buf.subarray(0, n));
    const started = this.pipe as BodyPipe | null;
    return started === null ? true : started.begin();
  }

  next(): Buffer | undefined {
    return this.pipe === null ? Buffer.allocUnsafe(HEAD_READ_BYTES) : this.pipe.next();
  }
}

const reads = new WeakMap<Socket, SourceReads>();

/**
 * A connection to a source whose reads a pipe can take over: a request's `createConnection` (its options are those
 * Node's Agent gives net.createConnection; the socket is returned, so the callback is not needed).
 */
export function connectSource(options: ClientRequestArgs): Socket {
  const r = new SourceReads();
  const socket = createConnection({
    ...(options as NetConnectOpts),
    // `buffer` may return nothing: the socket then reads into the buffer it has (pipe.next()).
    onread: { buffer: () => r.next() as Uint8Array, callback: (n, buf) => r.read(n, buf as Buffer) },
  });
  r.socket = socket;
  reads.set(socket, r);
  return socket;
}

/** An Agent (kept connections to the sources) whose connections are connectSource's. */
export class SourceAgent extends Agent {
  override createConnection(options: ClientRequestArgs): Socket {
    return connectSource(options);
  }
}

/**
 * Takes the rest of `answer`'s body (`length` bytes, as its Content-Length says) off Node's client and writes it to
 * `res` from reused buffers. Call it within the 'response' event (the parser is still at the headers' chunk). False
 * when the socket is not one of connectSource's: the body then goes through Node's client as before.
 */
export function pipeBody(
  answer: IncomingMessage,
  res: ServerResponse,
  length: number,
  hooks: PipeHooks,
): BodyPipe | null {
  const r = reads.get(answer.socket);
  if (r === undefined || r.pipe !== null) return null;
  r.pipe = new BodyPipe(answer, answer.socket, res, length, hooks);
  return r.pipe;
}

/**
 * One large body, source to engine. A buffer is read into, written to the engine, and read into again once that
 * write is done (the kernel has the bytes); with every buffer in a write (the engine reads more slowly) or the rate
 * spent, the source is not read.
 */
export class BodyPipe {
  private left: number;
  private readonly buffers: Buffer[] = [];
  /** The buffers not in a write (each whole; a read gets a view of one). */
  private readonly free: Buffer[] = [];
  /** The memory the socket reads into next (null: still one of the head's buffers). */
  private installed: ArrayBufferLike | null = null;
  /** Reasons not to read now: a rate wait, every buffer in a write. */
  private holds = 0;
  private waitingBuffer = false;
  finished = false;

  constructor(
    private readonly answer: IncomingMessage,
    private readonly socket: Socket,
    private readonly res: ServerResponse,
    length: number,
    private readonly hooks: PipeHooks,
  ) {
    this.left = length;
    for (let i = 0; i < PIPE_BUFFERS; i++) this.buffers.push(Buffer.allocUnsafeSlow(PIPE_BUFFER_BYTES));
    this.free.push(...this.buffers);
  }

  /**
   * Right after the headers' chunk went through the parser: the body bytes that came with the headers are in the
   * answer (copies: the parser's), written first. Returns whether to read on.
   */
  begin(): boolean {
    // (Reading the answer resumes the socket: Node's client paused it if the chunk was over the answer's mark.)
    const c = this.answer.read() as Buffer | null;
    if (c !== null) this.put(c.subarray(0, this.left), null);
    const on = this.proceed();
    if (on) this.socket.resume();
    return on;
  }

  read(n: number, view: Buffer): boolean {
    // Bytes past the Content-Length would be the source's next answer, unasked for: not relayed.
    if (!this.finished) this.put(view.subarray(0, Math.min(n, this.left)), this.whole(view));
    return this.proceed();
  }

  /** The memory for the next read: a free buffer, or none (reading stops until the installed one's write is done). */
  next(): Buffer | undefined {
    const b = this.free.pop();
    if (b === undefined) return undefined;
    this.installed = b.buffer;
    return b.subarray(0, this.hooks.readSize(b.length));
  }

  private whole(view: Buffer): Buffer | null {
    return this.buffers.find((b) => b.buffer === view.buffer) ?? null;
  }

  /** Writes `chunk` to the engine; `buf` (the whole buffer it is in) is free again once the write is done. */
  private put(chunk: Buffer, buf: Buffer | null): void {
    if (chunk.length === 0) return;
    this.left -= chunk.length;
    if (buf === null) this.res.write(chunk);
    else this.res.write(chunk, () => this.written(buf));
    const wait = this.hooks.moved(chunk.length);
    if (this.left === 0) {
      this.finished = true;
      this.hooks.ended();
      return;
    }
    if (wait > 0) {
      this.hooks.waited();
      this.holds++;
      setTimeout(() => this.release(), wait);
    }
  }

  /** Whether the socket reads on: nothing holds it and a buffer is free for the read. */
  private proceed(): boolean {
    if (this.finished) return false;
    if (this.free.length === 0 && !this.waitingBuffer) {
      this.waitingBuffer = true;
      this.holds++;
    }
    return this.holds === 0;
  }

  private written(buf: Buffer): void {
    if (buf.buffer !== this.installed) {
      this.free.push(buf);
      return;
    }
    // The socket still has this buffer for its next read (none was free): it may read into it again now.
    if (this.waitingBuffer) {
      this.waitingBuffer = false;
      this.release();
    }
  }

  private release(): void {
    if (--this.holds === 0 && !this.finished) this.socket.resume();
  }
}
