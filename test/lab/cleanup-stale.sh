#!/bin/sh
# Safety net for crashed lab runs: removes lab namespaces (wl-<pid>-<tag>-<role>), their /etc/netns/<ns> dirs and
# /tmp/wccplab-<pid>-* dirs whose creating process <pid> is gone. A live run's namespaces are never touched.
# Processes still inside a stale namespace are killed (SIGKILL) by PID before the namespace is deleted.
# Usage: test/lab/cleanup-stale.sh [--dry-run]     (needs root)
set -u
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1

# alive PID: /proc/<pid>/stat exists and the state is not Z (zombie) or X (dead)
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  state=$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$state" != "Z" ] && [ "$state" != "X" ]
}

act() {
  echo "$*"
  [ "$DRY" = 1 ] || "$@"
}

removed=0
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^wl-[0-9][0-9]*-'); do
  pid=$(echo "$ns" | sed 's/^wl-\([0-9]*\)-.*/\1/')
  alive "$pid" && continue
  for p in $(ip netns pids "$ns" 2>/dev/null); do act kill -KILL "$p"; done
  act ip netns del "$ns"
  removed=$((removed + 1))
done
for d in /etc/netns/wl-[0-9]*-*; do
  [ -d "$d" ] || continue
  pid=$(basename "$d" | sed 's/^wl-\([0-9]*\)-.*/\1/')
  alive "$pid" || act rm -rf "$d"
done
for d in /tmp/wccplab-[0-9]*-*; do
  [ -d "$d" ] || continue
  pid=$(basename "$d" | sed 's/^wccplab-\([0-9]*\)-.*/\1/')
  alive "$pid" || act rm -rf "$d"
done
echo "stale lab namespaces removed: $removed"
