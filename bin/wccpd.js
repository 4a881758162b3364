#!/usr/bin/env node
// Runs the compiled daemon (dist/ is built by `npm ci` / `npm run build`).
import '../dist/src/cli/wccpd.js';
