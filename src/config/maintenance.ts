// services[i].maintenance: cron-scheduled windows during which an engine (or every engine of the service) drains.
// The cron text is checked here with node-cron's own parser, so a typo is a config error naming the key, not a
// window that silently never comes.
import { validateDetailed } from 'node-cron';
import { cidrContains, ipv4ToNumber, type Cidr } from '../address.js';
import type { KeyPath, Reader } from './reader.js';
import { sectionKeys } from './keys.js';
import type { MaintenanceWindowConfig } from './types.js';

const DAY = 86_400_000;

function cronProblem(text: string): string | null {
  const fields = text.trim().split(/\s+/).length;
  if (fields !== 5 && fields !== 6) {
    return `${JSON.stringify(text)} has ${fields} fields; a cron expression has 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)`;
  }
  let v: ReturnType<typeof validateDetailed>;
  try {
    v = validateDetailed(text);
  } catch (e) {
    return `${JSON.stringify(text)} is not a valid cron expression: ${(e as Error).message}`;
  }
  if (v.valid) return null;
  const why = v.errors
    .map((e) => `${e.field}${e.value !== undefined ? ` ${JSON.stringify(e.value)}` : ''}: ${e.message}`)
    .join('; ');
  return `${JSON.stringify(text)} is not a valid cron expression (${why || 'rejected by node-cron'})`;
}

function timezoneProblem(tz: string): string | null {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return null;
  } catch {
    return `${JSON.stringify(tz)} is not an IANA time zone (e.g. UTC, Europe/Paris)`;
  }
}

export function readMaintenance(
  r: Reader,
  obj: Record<string, unknown>,
  path: KeyPath,
  allow: readonly Cidr[] | null,
): MaintenanceWindowConfig[] {
  const items = r.list(obj, 'maintenance', path) ?? [];
  const out: MaintenanceWindowConfig[] = [];
  items.forEach((raw, i) => {
    const wPath: KeyPath = [...path, 'maintenance', i];
    const w = r.mapping(raw, wPath, sectionKeys('services.maintenance'));
    if (w === null) return;
    let ok = true;
    const cron = typeof w.cron === 'string' ? w.cron : null;
    if (cron === null) {
      r.add(
        [...wPath, 'cron'],
        w.cron === undefined ? 'is required, e.g. "0 2 * * sun" (02:00 every Sunday)' : 'must be a string (quote it)',
      );
      ok = false;
    } else {
      const problem = cronProblem(cron);
      if (problem !== null) {
        r.add([...wPath, 'cron'], problem);
        ok = false;
      }
    }
    if (w.duration === undefined) {
      r.add([...wPath, 'duration'], 'is required, e.g. 1h');
      ok = false;
    }
    const durationMs = r.duration(w, 'duration', wPath, 1000, 7 * DAY, 0, '1s to 168h');
    if (w.action !== undefined && w.action !== 'drain') {
      r.add([...wPath, 'action'], `${JSON.stringify(w.action)} is not a maintenance action; the one action is drain`);
      ok = false;
    }
    let engine: string | null = null;
    if (w.engine !== undefined && w.engine !== null) {
      if (typeof w.engine !== 'string' || ipv4ToNumber(w.engine) === null) {
        r.add([...wPath, 'engine'], `${JSON.stringify(w.engine)} is not an IPv4 address`);
        ok = false;
      } else if (allow !== null && !allow.some((c) => cidrContains(c, w.engine as string))) {
        r.add(
          [...wPath, 'engine'],
          `${w.engine} is outside engines.allow (${allow.map((c) => c.text).join(', ')}), so it can never register`,
        );
        ok = false;
      } else engine = w.engine;
    }
    let timezone: string | null = null;
    if (w.timezone !== undefined) {
      const problem = typeof w.timezone === 'string' ? timezoneProblem(w.timezone) : 'must be a string such as UTC';
      if (problem !== null) {
        r.add([...wPath, 'timezone'], problem);
        ok = false;
      } else timezone = w.timezone as string;
    }
    if (ok && cron !== null && durationMs > 0)
      out.push({ cron: cron.trim(), durationMs, action: 'drain', engine, timezone });
  });
  return out;
}
