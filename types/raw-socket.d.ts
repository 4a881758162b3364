// raw-socket ships no types; this is the part of its surface wccpd uses (see native-free-shims/raw-socket).
declare module 'raw-socket' {
  import type { EventEmitter } from 'node:events';
  export const AddressFamily: { IPv4: number; IPv6: number };
  export const Protocol: { None: number; ICMP: number; TCP: number; UDP: number; ICMPv6: number };
  export const SocketLevel: { SOL_SOCKET: number; IPPROTO_IP: number; IPPROTO_IPV6: number };
  export const SocketOption: Record<string, number>;
  export interface SocketOptions {
    addressFamily?: number;
    protocol?: number;
    bufferSize?: number;
    generateChecksums?: boolean;
    checksumOffset?: number;
  }
  export interface Socket extends EventEmitter {
    send(
      buffer: Buffer,
      offset: number,
      length: number,
      address: string,
      beforeCallback: ((this: Socket) => void) | null,
      afterCallback: (error: Error | null, bytes: number) => void,
    ): this;
    setOption(level: number, option: number, value: number | Buffer, length?: number): void;
    getOption(level: number, option: number, buffer: Buffer, length: number): number;
    pauseRecv(): this;
    resumeRecv(): this;
    close(): this;
  }
  export function createSocket(options?: SocketOptions): Socket;
  export function createChecksum(
    ...buffers: Array<Buffer | { buffer: Buffer; offset: number; length: number }>
  ): number;
  export function writeChecksum(buffer: Buffer, offset: number, checksum: number): Buffer;
  export function htonl(n: number): number;
  export function htons(n: number): number;
  export function ntohl(n: number): number;
  export function ntohs(n: number): number;
}
