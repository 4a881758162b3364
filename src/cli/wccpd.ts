// wccpd entry point: parses the command line and hands over to the daemon (src/daemon.ts).
console.error('wccpd: the daemon is not built yet');
process.exit(1);
