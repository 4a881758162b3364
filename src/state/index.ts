// The state part's surface: save and load the persisted tables and membership.
export { saveState, loadState, STATE_FILE, PREVIOUS_STATE_FILE, type LoadedState, type BadStateFile } from './store.js';
export { encodeState, decodeState, type DecodedState } from './codec.js';
export {
  emptyState,
  STATE_VERSION,
  type PersistedState,
  type PersistedService,
  type PersistedEngine,
  type PersistedAdminWeight,
} from './types.js';
