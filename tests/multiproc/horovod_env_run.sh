#!/usr/bin/env bash
# Starts NP ranks of a command on this host the way `horovodrun --gloo -np NP -H localhost:NP`
# does, without Horovod: a stand-in for its HTTP key-value server (horovod_kv_server.py)
# and, for every rank, the variables gloo_run.py gives it.
#
#   horovod_env_run.sh [-a ADDR] [-l LOG] [-t SEC] NP CMD [ARGS...]
#     -a ADDR  HOROVOD_GLOO_RENDEZVOUS_ADDR (default 127.0.0.1; horovodrun gives the
#              address of the interface the hosts share)
#     -l LOG   append the server's request log ("PUT /scope/key 200") to LOG
#     -t SEC   kill ranks still running after SEC seconds (default 120)
#
# Prints "[hvd] rank R exited S" for every rank and exits with the first failed rank's
# status, else 0. BRAID_* left in the environment (a run under braidrun) are removed, so
# the ranks see only what horovodrun would give them.
set -u

addr=127.0.0.1
log=
limit=120
while getopts a:l:t: opt; do
  case $opt in
    a) addr=$OPTARG ;;
    l) log=$OPTARG ;;
    t) limit=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -lt 2 ]; then
  echo "usage: $0 [-a ADDR] [-l LOG] [-t SEC] NP CMD [ARGS...]" >&2
  exit 2
fi
np=$1
shift

dir=$(mktemp -d)
srv=
cleanup() {
  [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
[ -n "$log" ] || log=$dir/requests.log

python3 "$(dirname "$0")/horovod_kv_server.py" "$dir/port" "$log" &
srv=$!
for _ in $(seq 100); do
  [ -s "$dir/port" ] && break
  sleep 0.1
done
if [ ! -s "$dir/port" ]; then
  echo "[hvd] the key-value server did not start" >&2
  exit 1
fi
port=$(cat "$dir/port")

pids=()
for ((r = 0; r < np; r++)); do
  env -u BRAID_RANK -u BRAID_WORLD_SIZE -u BRAID_LOCAL_RANK -u BRAID_LOCAL_SIZE \
    -u BRAID_STORE_ADDR -u BRAID_STORE_EXTERNAL \
    HOROVOD_HOSTNAME=localhost HOROVOD_RANK=$r HOROVOD_SIZE=$np \
    HOROVOD_LOCAL_RANK=$r HOROVOD_LOCAL_SIZE=$np HOROVOD_CROSS_RANK=0 HOROVOD_CROSS_SIZE=1 \
    HOROVOD_GLOO_RENDEZVOUS_ADDR=$addr HOROVOD_GLOO_RENDEZVOUS_PORT=$port \
    HOROVOD_CONTROLLER=gloo HOROVOD_CPU_OPERATIONS=gloo PYTHONUNBUFFERED=1 \
    timeout -s KILL "$limit" "$@" &
  pids+=($!)
done

first=0
for ((r = 0; r < np; r++)); do
  wait "${pids[r]}"
  s=$?
  echo "[hvd] rank $r exited $s"
  if [ "$first" = 0 ] && [ "$s" != 0 ]; then first=$s; fi
done
exit "$first"
