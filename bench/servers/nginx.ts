// A fast static responder for the data-path bench: Debian's nginx with a throw-away config, one worker, no access
// log, a tiny body and an X-Served-By header that says which namespace answered. Squid and a single-threaded Node
// server saturate well below what the data path carries here, so they would hide the differences being measured.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const NGINX = '/usr/sbin/nginx';

export interface NginxSite {
  /** Who answers: goes into the X-Served-By header and the body. */
  readonly name: string;
  readonly port: number;
  /** Working directory for the config, pid file, logs and temp paths (created). */
  readonly dir: string;
  /** Listen on IPv6 too (a dual-stack lab). */
  readonly ipv6?: boolean;
}

/** Renders nginx.conf for one site and returns the argv that runs nginx in the foreground with it. */
export function nginxCommand(site: NginxSite): { cmd: string; args: string[] } {
  mkdirSync(join(site.dir, 'tmp'), { recursive: true });
  const t = join(site.dir, 'tmp');
  const conf = [
    'user root;', // temp paths live in a root-owned lab dir; nothing here is exposed outside the namespace
    'worker_processes 1;',
    'daemon off;',
    `pid ${join(site.dir, 'nginx.pid')};`,
    `error_log ${join(site.dir, 'error.log')} warn;`,
    'events { worker_connections 8192; }',
    'http {',
    '  access_log off;',
    '  default_type text/plain;',
    '  keepalive_requests 10000000;',
    '  keepalive_timeout 60s;',
    `  client_body_temp_path ${t}/body; proxy_temp_path ${t}/proxy; fastcgi_temp_path ${t}/fastcgi;`,
    `  uwsgi_temp_path ${t}/uwsgi; scgi_temp_path ${t}/scgi;`,
    `  server {`,
    `    listen ${site.port} backlog=4096;`,
    ...(site.ipv6 === true ? [`    listen [::]:${site.port} backlog=4096;`] : []),
    `    location / { add_header X-Served-By ${site.name} always; return 200 "${site.name}\\n"; }`,
    '  }',
    '}',
    '',
  ].join('\n');
  const file = join(site.dir, 'nginx.conf');
  writeFileSync(file, conf);
  return { cmd: NGINX, args: ['-p', site.dir, '-e', join(site.dir, 'error.log'), '-c', file] };
}
