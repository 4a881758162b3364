// Two clocks. Durations, deadlines and liveness (HERE_I_AM silence, timers.settle, the restart grace, probe
// verdicts, log intervals, maintenance windows' lengths, caches) run on a monotonic clock: an NTP step, an admin's
// `date -s` or a VM resumed from suspend does not move it, so a correction cannot make every engine look silent at
// once. The wall clock only dates what a person reads (admin views, logs) or a file keeps across restarts (the state
// file), and cron texts (docs/operations.md, "Clock steps").
import { performance } from 'node:perf_hooks';

export interface Clock {
  /** Monotonic milliseconds: only differences matter; never goes back, unmoved by a step of the wall clock. */
  now(): number;
}

export interface WallClock extends Clock {
  /** Wall-clock milliseconds since the epoch (may jump either way): for dates shown or persisted, never durations. */
  wall(): number;
}

/** Monotonic milliseconds of this process (CLOCK_MONOTONIC); a new process starts again near 0. */
export function monotonicNow(): number {
  return performance.now();
}

/** The clock of a running daemon. */
export const systemClock: WallClock = { now: monotonicNow, wall: () => Date.now() };

/** A monotonic time `t` of `clock` as wall-clock milliseconds, read now (for display and persistence). */
export function wallTimeOf(clock: WallClock, t: number): number {
  return Math.round(clock.wall() - (clock.now() - t));
}
