# shellcheck shell=bash
# netns_lib.sh: helpers for tests that run braid across emulated hosts with netns_run.sh.
# Source it; it defines functions only. Tests and the lead's planner checks build on it:
#
#   source tests/netns/netns_lib.sh
#   t=$(netns_allreduce_time_us --hosts 2 --ranks-per-host 2 --delay 1ms -- BRAID_ALGO=allreduce:0-inf:ring)
#
# Needs NETNS_RUN (path of netns_run.sh; defaults to the one beside this file) and, for the
# perf helpers, ALLREDUCE_PERF.

NETNS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${NETNS_RUN:=$NETNS_DIR/netns_run.sh}"
readonly NETNS_SKIP=77

# netns_scratch_init: makes a scratch folder for this test, NETNS_TMP, removed on exit.
# Call it from the test's main shell (not inside $(...), whose exit would remove it).
netns_scratch_init() {
  NETNS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/braid-netns.XXXXXX") || exit 1
  # shellcheck disable=SC2064  # expand now: the path is fixed from here on
  trap "rm -rf '$NETNS_TMP'" EXIT
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Namespaces that netns_run.sh with pid $1 made and has not removed.
netns_left_by() {
  ip netns list 2>/dev/null | awk -v p="bnr-$1-" 'index($1, p) == 1 { print $1 }'
}

# netns_exec OUT NETNS_RUN_ARGS... -- CMD...: runs netns_run.sh, its stdout and stderr
# into file OUT (and echoed, for CTest's log); returns its exit status. Sets NR_PID to
# netns_run's pid and fails the test if that run left a namespace behind. A skip (77) ends
# the test as skipped at once: every later step would need the same namespaces.
netns_exec() {
  local out=$1
  shift
  "$NETNS_RUN" "$@" >"$out" 2>&1 &
  NR_PID=$!
  wait "$NR_PID"
  local status=$?
  cat "$out"
  if ((status == NETNS_SKIP)); then
    grep -m1 '^SKIP:' "$out" >&2
    exit "$NETNS_SKIP"
  fi
  local left
  left=$(netns_left_by "$NR_PID")
  [[ -z $left ]] || fail "netns_run (pid $NR_PID) left namespaces behind: $left"
  return "$status"
}

# json_values FILE KEY: every value of "KEY" in an *_perf -J file, in file order, one per
# line (for "time_us": out-of-place then in-place, row by row). The tools write flat keys
# in a fixed order, so a match on the text is exact and needs no JSON tool on the machine.
json_values() {
  grep -o "\"$2\": [^,}]*" "$1" | sed 's/^[^:]*: //'
}

# netns_allreduce_time_us NETNS_RUN_ARGS... -- [VAR=VAL...]: the mean time, in
# microseconds, of an 8-byte out-of-place allreduce measured by allreduce_perf across the
# emulated hosts, with VAR=VAL set for every rank (a BRAID_ALGO override, say). Prints the
# time; returns netns_run's status (77 when the machine cannot shape or make namespaces).
# The perf tool's own check runs too (-c 1): a wrong result is a failure, not a time.
netns_allreduce_time_us() {
  local -a nr_args=() env_args=()
  while (($#)) && [[ $1 != -- ]]; do nr_args+=("$1"); shift; done
  (($#)) && shift
  env_args=("$@")
  local json out status
  json=$(mktemp "${NETNS_TMP:?call netns_scratch_init first}/ar.XXXXXX.json")
  out=$(mktemp "$NETNS_TMP/ar.XXXXXX.log")
  # 200 timed iterations after 20 warm-up ones: at 1 ms of added latency that is well under
  # two seconds per run, and enough that one slow iteration does not decide the comparison.
  env "${env_args[@]}" "$NETNS_RUN" "${nr_args[@]}" -- \
    "$ALLREDUCE_PERF" -b 8 -e 8 -n "${NETNS_PERF_ITERS:-200}" -w 20 -c 1 -J "$json" >"$out" 2>&1
  status=$?
  if ((status != 0)); then
    cat "$out" >&2
    return "$status"
  fi
  local wrong
  wrong=$(json_values "$json" wrong | sort -u | tr '\n' ' ')
  [[ $wrong == "0 " ]] || { cat "$out" >&2; fail "allreduce_perf reported wrong elements: $wrong"; }
  json_values "$json" time_us | head -1
}
