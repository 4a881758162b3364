// wccpctl entry point: the admin CLI (src/admin/wccpctl.ts).
console.error('wccpctl: not built yet');
process.exit(1);
