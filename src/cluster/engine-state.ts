// An engine's states (docs/health.md) and what each means to the parts that read them: the one home of these words.
// The data plane's routes (views.ts), the warm-up's sources (warmup/policy.ts) and /metrics read them from here.

/** In lifecycle order: joining -> usable -> draining | suspect -> gone. */
export const ENGINE_STATES = ['joining', 'usable', 'draining', 'suspect', 'gone'] as const;

/**
 * `suspect`: still a WCCP member (HERE_I_AMs arrive) but its active health probes fail, so it holds no buckets until
 * they pass again (docs/health.md).
 */
export type EngineState = (typeof ENGINE_STATES)[number];

/**
 * Its proxy is taken to answer: usable, or draining (it holds no buckets but serves what it has); a suspect one fails
 * its probes. The warm-up asks only such engines for objects.
 */
export function answers(state: EngineState): boolean {
  return state === 'usable' || state === 'draining';
}

/**
 * It keeps its route in the data plane: an engine that answers, and a suspect one. Draining and suspect engines hold
 * no buckets, but connections already steered to them keep their route until they end (docs/architecture.md,
 * stickiness), and their own traffic is never redirected.
 */
export function keepsRoute(state: EngineState): boolean {
  return answers(state) || state === 'suspect';
}
