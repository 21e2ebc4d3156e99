#!/bin/sh
# One rank of a braidrun job whose store a stranger attacks (store_stranger attack) while the
# job starts and runs. Rank 0 reports braidrun's (its parent's) resident memory and open
# descriptors before, during and after the attack; every rank runs mp_collectives.
#   store_attack_job.sh MP_DIR SECONDS
mp="$1"
secs="$2"
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }
if [ "$BRAID_RANK" = 0 ]; then
  echo "BEFORE rss_kb=$(rss $PPID) fds=$(fds $PPID)"
  "$mp/store_stranger" attack "$BRAID_STORE_ADDR" "$secs" &
  a=$!
  sleep 2
  echo "DURING rss_kb=$(rss $PPID) fds=$(fds $PPID)"
  "$mp/mp_collectives" || exit 3
  echo "DURING rss_kb=$(rss $PPID) fds=$(fds $PPID)"
  wait $a
  sleep 3
  echo "AFTER rss_kb=$(rss $PPID) fds=$(fds $PPID)"
else
  # Joins while the flood is on.
  sleep 2
  exec "$mp/mp_collectives"
fi
