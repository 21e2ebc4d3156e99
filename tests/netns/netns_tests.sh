#!/usr/bin/env bash
# netns_tests.sh CASE: the CTest cases of tests/netns, one per invocation. Each runs braid
# (or, for `launcher`, plain commands) as several hosts on this machine through
# netns_run.sh and checks the results. Exit 0 = pass, 77 = skipped (with a SKIP: line
# saying why), anything else = fail.
#
# Environment (set by tests/netns/CMakeLists.txt): MP_COLLECTIVES, ALLREDUCE_PERF,
# BRAID_INFO: paths of the built programs.

set -u
set -o pipefail
# shellcheck source=netns_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns_lib.sh"

# A rank that hangs must fail inside braid, with a message naming the peer, well before
# netns_run's --timeout (which in turn stays inside CTest's TIMEOUT, so that netns_run
# always gets to clean up itself).
export BRAID_TIMEOUT=20
readonly kRunTimeout=40

# --- checks on braid's INFO summary ------------------------------------------------------
# Rank 0 logs, at init: "... N ranks on H hosts, ..., transports [t0,t1,...], ...", the
# transport it uses to reach each rank. check_summary OUT NRANKS NHOSTS RPH checks the
# host count and that rank 0 reaches its own host's ranks over shm and the others over tcp.
check_summary() {
  local out=$1 nranks=$2 nhosts=$3 rph=$4 line
  line=$(grep -m1 -E '[0-9]+ ranks on [0-9]+ hosts' "$out") || fail "no INFO summary line from rank 0 in the output"
  [[ $line =~ ([0-9]+)\ ranks\ on\ ([0-9]+)\ hosts ]] || fail "cannot read the summary: $line"
  ((BASH_REMATCH[1] == nranks)) || fail "braid saw ${BASH_REMATCH[1]} ranks, want $nranks: $line"
  ((BASH_REMATCH[2] == nhosts)) || fail "braid saw ${BASH_REMATCH[2]} hosts, want $nhosts: $line"
  [[ $line =~ transports\ \[([^]]*)\] ]] || fail "no transport list in the summary: $line"
  local -a tp
  IFS=, read -r -a tp <<<"${BASH_REMATCH[1]}"
  ((${#tp[@]} == nranks)) || fail "transport list has ${#tp[@]} entries, want $nranks: $line"
  local r want
  for ((r = 1; r < nranks; ++r)); do
    if ((r < rph)); then want=shm; else want=tcp; fi  # rank 0 is on host 0 with ranks [0, rph)
    [[ ${tp[r]} == "$want" ]] || fail "rank 0 reaches rank $r over '${tp[r]}', want $want (same host: $((r < rph))): $line"
  done
  echo "ok: braid reports $nranks ranks on $nhosts hosts, transports [${BASH_REMATCH[1]}]"
}

check_all_ok() {
  local out=$1 nranks=$2 r
  for ((r = 0; r < nranks; ++r)); do
    grep -q "collectives ok rank $r of $nranks" "$out" || fail "rank $r did not report 'collectives ok'"
  done
}

# mp_collectives (allreduce and broadcast, several sizes, types and ops, every element
# checked by the program itself) across HOSTS x RPH ranks.
collectives() {
  local hosts=$1 rph=$2 dir out
  dir=$NETNS_TMP
  out=$dir/out
  BRAID_DEBUG=INFO netns_exec "$out" --hosts "$hosts" --ranks-per-host "$rph" --timeout "$kRunTimeout" \
    --tag-output -- "$MP_COLLECTIVES" || fail "mp_collectives across $hosts hosts x $rph ranks exited with status $?"
  check_all_ok "$out" $((hosts * rph))
  check_summary "$out" $((hosts * rph)) "$hosts" "$rph"
}

# --- cases -------------------------------------------------------------------------------

case_collectives_2x2() { collectives 2 2; }
case_collectives_3x1() { collectives 3 1; }

# allreduce_perf's own check (-c 1) across hosts, sizes from 8 B to 8 MB so that both the
# small-message and the pipelined paths cross the TCP link: #wrong must be 0 on every row.
case_allreduce_perf_2x2() {
  local dir out
  dir=$NETNS_TMP
  out=$dir/out
  BRAID_DEBUG=INFO netns_exec "$out" --hosts 2 --ranks-per-host 2 --timeout "$kRunTimeout" -- \
    "$ALLREDUCE_PERF" -b 8 -e 8M -f 8 -n 5 -w 1 -c 1 -J "$dir/ar.json" || fail "allreduce_perf exited with status $?"
  grep -q 'Out of bounds values : 0 OK' "$out" || fail "allreduce_perf did not report 'Out of bounds values : 0 OK'"
  local rows wrong
  rows=$(json_values "$dir/ar.json" wrong | wc -l)
  wrong=$(json_values "$dir/ar.json" wrong | sort -u | tr '\n' ' ')
  ((rows == 14)) || fail "want 7 sizes x 2 placements checked in $dir/ar.json, found $rows"
  [[ $wrong == "0 " ]] || fail "#wrong values across hosts: $wrong"
  check_summary "$out" 4 2 2
  echo "ok: $rows checked results, all with #wrong = 0"
}

# --rate really caps what a host sends: a 1 MB allreduce between two hosts at 100 Mbit/s
# moves 1 MB each way per call (2(n-1)/n with n = 2), so it cannot run faster than
# 1 MB / 12.5 MB/s = 84 ms, i.e. a bus bandwidth of 0.0125 GB/s; unshaped it runs 10x faster
# even on a 2-core machine. The bound allows 50 % slack for rounding, nothing more.
case_rate_shaping() {
  local dir out bw
  dir=$NETNS_TMP
  out=$dir/out
  netns_exec "$out" --hosts 2 --ranks-per-host 1 --rate 100mbit --timeout "$kRunTimeout" -- \
    "$ALLREDUCE_PERF" -b 1M -e 1M -n 3 -w 1 -c 1 -J "$dir/ar.json" || fail "allreduce_perf exited with status $?"
  for bw in $(json_values "$dir/ar.json" busbw); do
    awk -v b="$bw" 'BEGIN { exit !(b > 0 && b < 0.0125 * 1.5) }' ||
      fail "bus bandwidth $bw GB/s at --rate 100mbit: the link is not shaped (want < 0.019 GB/s)"
  done
  echo "ok: bus bandwidth under --rate 100mbit: $(json_values "$dir/ar.json" busbw | tr '\n' ' ')GB/s"
}

# With 1 ms added to every packet between hosts, an 8-byte allreduce pays that latency once
# per inter-host step. A ring over 4 ranks on 2 hosts takes 2(n-1) = 6 steps in sequence,
# each crossing hosts; tree and hierarchical cross once or twice per direction. So the
# planner must pick one of those for small messages, and the default must beat forced ring.
case_latency_algo() {
  # Read whole first: under pipefail, `braid-info | grep -q` fails whenever grep stops
  # reading before braid-info has written everything (SIGPIPE), which skipped this case
  # at random.
  local config
  config=$("$BRAID_INFO" --config)
  grep -q '^BRAID_ALGO\b' <<<"$config" || {
    echo "SKIP: braid-info --config does not list BRAID_ALGO yet, so ring cannot be forced"
    exit "$NETNS_SKIP"
  }
  local args=(--hosts 2 --ranks-per-host 2 --delay 1ms --timeout "$kRunTimeout")
  local t_default t_ring status
  # The delay is checked first: without netem the case is skipped, not failed.
  t_ring=$(netns_allreduce_time_us "${args[@]}" -- BRAID_ALGO=allreduce:0-inf:ring)
  status=$?
  ((status == NETNS_SKIP)) && exit "$NETNS_SKIP"
  ((status == 0)) || fail "allreduce_perf with BRAID_ALGO=allreduce:0-inf:ring exited with status $status"
  local dir log
  dir=$NETNS_TMP
  log=$dir/default.log
  t_default=$(BRAID_DEBUG_FILE="$log.%p" BRAID_DEBUG=INFO netns_allreduce_time_us "${args[@]}" --)
  status=$?
  ((status == 0)) || fail "allreduce_perf with the planner's choice exited with status $status"
  echo "8 B allreduce, 2 hosts x 2 ranks, 1 ms added latency: planner ${t_default} us, forced ring ${t_ring} us"
  # When the planner logs its pick, it must be tree or hierarchical for this size.
  local picks
  picks=$(cat "$log".* 2>/dev/null | grep -iE 'allreduce.*(algorithm|algo)' || true)
  if [[ -n $picks ]]; then
    echo "$picks"
    grep -qiE 'tree|hier' <<<"$picks" || fail "the planner did not pick tree or hierarchical for an 8 B allreduce"
  fi
  # Every algorithm crosses hosts at least once, so the added millisecond must show: a
  # faster time means the delay was not applied and the comparison proves nothing.
  awk -v a="$t_default" 'BEGIN { exit !(a >= 900) }' ||
    fail "the 8 B allreduce took ${t_default} us with 1 ms added between hosts: the delay is not in effect"
  # The link probe at init measured the added millisecond (one way) between the hosts.
  local probe
  probe=$(cat "$log".* 2>/dev/null | grep -o 'probe: rank 0 <-> rank [0-9]* (another host): latency [0-9.]* us' | head -1)
  [[ -n $probe ]] || fail "rank 0 logged no link probe (BRAID_DEBUG=INFO)"
  echo "$probe"
  awk -v l="$(awk '{ print $(NF-1) }' <<<"$probe")" 'BEGIN { exit !(l >= 900 && l < 5000) }' ||
    fail "the link probe did not measure the 1 ms added between hosts: $probe"
  awk -v a="$t_default" -v b="$t_ring" 'BEGIN { exit !(a > 0 && a < b) }' ||
    fail "the planner's 8 B allreduce (${t_default} us) is not faster than forced ring (${t_ring} us)"
  echo "ok: planner beats forced ring by $(awk -v a="$t_default" -v b="$t_ring" 'BEGIN { printf "%.2fx", b / a }')"
}

# The launcher itself, without braid: the environment each rank gets, failure propagation,
# --timeout, and cleanup after SIGKILL (how CTest ends a test past its TIMEOUT).
# The UCX plugin between hosts. Every rank is forced onto ucx (across hosts it scores below
# tcp without RDMA) with UCX's own tcp: between namespaces of one machine UCX would
# otherwise pick its shared memory, which would leave the network untested.
# The direct GPU path across hosts (BRAID_CUDA_PATH=direct, docs/cuda.md) on the host-memory
# runtime: 2 hosts x 2 ranks, every collective on device buffers run by the kernels over the
# registered slots of shared memory within a host and of tcp between them; every element
# checked by device_rank, nothing staged, nothing left registered.
case_device_direct_2x2() {
  [[ -x ${DEVICE_RANK:-} ]] || { echo "SKIP: device_rank is not built (tests/unit/device left out)"; exit 77; }
  local out=$NETNS_TMP/out n
  BRAID_CUDA_PATH=direct BRAID_DEBUG=INFO netns_exec "$out" --hosts 2 --ranks-per-host 2 --timeout "$kRunTimeout" -- \
    "$DEVICE_RANK" || fail "device_rank across 2 hosts exited with status $?"
  n=$(grep -c 'DEVICE rank=[0-9] error=none kernels=[1-9][0-9]* slotKernels=0 areas=0 registered=[1-9][0-9]* copies=0' "$out")
  ((n == 4)) || fail "$n of 4 ranks ran every collective right through the kernels on registered slots"
  n=$(grep -c 'AFTER rank=[0-9] areas=0 imports=0 registered=0 hostLive=0 pid=' "$out")
  ((n == 4)) || fail "$n of 4 ranks undid everything at destroy"
  check_summary "$out" 4 2 2
  echo "ok: every collective on device buffers across 2 hosts on the direct path, nothing staged"
  # BRAID_CUDA_PATH=ipc with the device areas shared as file descriptors: each host's ranks
  # fetch each other's over the Unix socket of their own network namespace; tcp between the
  # hosts has no areas.
  BRAID_CUDA_PATH=ipc BRAID_CUDA_MEM_HANDLE=fd BRAID_DEBUG=INFO netns_exec "$out" --hosts 2 --ranks-per-host 2 \
    --timeout "$kRunTimeout" -- "$DEVICE_RANK" || fail "device_rank with ipc and descriptors exited with status $?"
  n=$(grep -c 'DEVICE rank=[0-9] error=none kernels=[1-9][0-9]* slotKernels=[1-9][0-9]* areas=[1-9][0-9]* .* fdImports=[1-9][0-9]* offered=0$' "$out")
  ((n == 4)) || fail "ipc with descriptors: $n of 4 ranks fetched their host peer's areas and ran on them"
  n=$(grep -c 'AFTER rank=[0-9] areas=0 imports=0 registered=0 hostLive=0 pid=' "$out")
  ((n == 4)) || fail "ipc with descriptors: $n of 4 ranks undid everything at destroy"
  echo "ok: ipc across 2 hosts, device areas shared by descriptor within each"
  # The same over UCX's tcp, whose slots come through the plugin ABI (version 5).
  [[ -n ${NETNS_UCX_PLUGIN:-} ]] || { echo "skipped the UCX run: braid was built without UCX"; return 0; }
  BRAID_TRANSPORT=ucx UCX_TLS=tcp BRAID_CUDA_PATH=direct BRAID_DEBUG=INFO netns_exec "$out" --hosts 2 \
    --ranks-per-host 2 --timeout "$kRunTimeout" -- "$DEVICE_RANK" || fail "device_rank over ucx exited with status $?"
  n=$(grep -c 'DEVICE rank=[0-9] error=none kernels=[1-9][0-9]* slotKernels=0 areas=0 registered=[1-9][0-9]* copies=0' "$out")
  ((n == 4)) || fail "over ucx: $n of 4 ranks ran every collective right through the kernels on registered slots"
  grep -q -E '4 ranks on 2 hosts.*transports \[self,ucx,ucx,ucx\]' "$out" || fail "rank 0 does not report ucx to every peer"
  echo "ok: the same over ucx across 2 hosts"
}

# mp_collectives and allreduce_perf's element check across 2 hosts x 2 ranks, then a rank
# of the other host killed mid-collective: every survivor names it within 5 s.
case_ucx_2x2() {
  [[ -n ${NETNS_UCX_PLUGIN:-} ]] || { echo "SKIP: braid was built without UCX: no ucx plugin"; exit 77; }
  local dir out
  dir=$NETNS_TMP
  out=$dir/out
  export BRAID_TRANSPORT=ucx UCX_TLS=tcp
  BRAID_DEBUG=INFO netns_exec "$out" --hosts 2 --ranks-per-host 2 --timeout "$kRunTimeout" \
    --tag-output -- "$MP_COLLECTIVES" || fail "mp_collectives over ucx exited with status $?"
  check_all_ok "$out" 4
  grep -q -E '4 ranks on 2 hosts.*transports \[self,ucx,ucx,ucx\]' "$out" ||
    fail "rank 0 does not report ucx to every peer across 2 hosts"
  echo "ok: collectives over ucx across 2 hosts"
  netns_exec "$out" --hosts 2 --ranks-per-host 2 --timeout "$kRunTimeout" -- \
    "$ALLREDUCE_PERF" -b 8 -e 8M -f 8 -n 3 -w 1 -c 1 || fail "allreduce_perf over ucx exited with status $?"
  grep -q 'Out of bounds values : 0 OK' "$out" || fail "allreduce_perf over ucx did not report 0 wrong"
  echo "ok: allreduce_perf over ucx, 0 wrong"
  # Namespaces under one host name, as \`ip netns exec\` or containers with networks of their
  # own make them: without BRAID_HOST_ID every rank has the same host id, but the plugin is
  # told the others' network namespaces differ. Before, it gave UCX the loopback interface
  # alone, as for peers on one host, and init failed ("Destination is unreachable").
  netns_exec "$out" --hosts 2 --ranks-per-host 2 --timeout "$kRunTimeout" -- \
    sh -c 'unset BRAID_HOST_ID; exec "$0" "$@"' "$ALLREDUCE_PERF" -b 8 -e 1M -f 32 -n 3 -w 1 -c 1 ||
    fail "allreduce_perf over ucx across namespaces under one host name exited with status $?"
  grep -q 'Out of bounds values : 0 OK' "$out" || fail "allreduce_perf over ucx under one host name: not 0 wrong"
  echo "ok: allreduce_perf over ucx across namespaces under one host name, 0 wrong"
  netns_exec "$out" --hosts 2 --ranks-per-host 2 --grace 20 --timeout "$kRunTimeout" -- \
    "$(dirname "$MP_COLLECTIVES")/mp_fault" kill 3 5
  local r line
  for r in 0 1 2; do
    line=$(grep "RESULT rank=$r " "$out") || fail "survivor $r reported nothing"
    [[ $line =~ code=3\ failed_rank=3\ elapsed_ms=([0-9]+) ]] || fail "survivor $r: want a remote error naming rank 3: $line"
    ((BASH_REMATCH[1] < 5000)) || fail "survivor $r took ${BASH_REMATCH[1]} ms to notice"
  done
  echo "ok: rank 3 (host 1) killed, every survivor names it"
}

# UCX's tcp on one host while an interface comes and goes: 4 ranks in a network namespace of
# their own (and a sysfs of its own: UCX finds its tcp devices in /sys/class/net), with a
# bridge holding an address that is deleted while the job runs, as a container's or another
# test's bridge may be. Beside it, the namespace's "NIC": a bridge too, of MTU 1400 as this
# VM's eth0, without ports, so that its default route leads nowhere, as the host's does for
# the gone address. UCX ranks its tcp devices by their MTU among other things and put every
# lane on the gone bridge: the job stalled until BRAID_TIMEOUT. The plugin gives UCX the
# loopback interface alone for peers on one host, so the job must finish with every element
# right. NETNS_UCX_DEVICES=all restores UCX's own choice (UCX_NET_DEVICES=all), and the check
# fails (two runs in three here: the ranks stall until BRAID_TIMEOUT).
#
# The bridge goes once rank 0 has logged its summary (every connection made, UCX's lanes
# chosen), and the job must still be running then. Its length is a number of iterations, so
# its time follows the machine: 2,000 allreduces of 1 MiB took 6 s alone on 2 cores and 18-21
# s beside three busy loops. A fixed 5,000 outran braidrun's 60 s once beside the Horovod
# suite, with no rank stalled; braidrun's limit (150 s) now leaves room for the slowest.
case_ucx_interface_gone() {
  [[ -n ${NETNS_UCX_PLUGIN:-} ]] || { echo "SKIP: braid was built without UCX: no ucx plugin"; exit 77; }
  command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
  local out=$NETNS_TMP/out braidrun
  braidrun=$(dirname "$BRAID_INFO")/braidrun
  [[ -x $braidrun ]] || fail "no braidrun beside $BRAID_INFO"
  # shellcheck disable=SC2016  # expanded by the inner shell
  unshare --net --mount env BRAIDRUN="$braidrun" ALLREDUCE_PERF="$ALLREDUCE_PERF" JOB_LOG="$NETNS_TMP/job" bash -c '
    { mount -t sysfs sysfs /sys && ip link set lo up &&
      ip link add brgone type bridge && ip addr add 10.99.7.1/24 dev brgone && ip link set brgone up &&
      ip link add nic0 type bridge && ip link set nic0 mtu 1400 &&
      ip addr add 192.0.2.50/24 dev nic0 && ip link set nic0 up && ip route add default via 192.0.2.1 dev nic0
    } 2>/dev/null || exit 77
    env BRAID_TIMEOUT=10 BRAID_TRANSPORT=ucx UCX_TLS=tcp,self ${NETNS_UCX_DEVICES:+UCX_NET_DEVICES=$NETNS_UCX_DEVICES} \
      BRAID_DEBUG=INFO "$BRAIDRUN" -np 4 --timeout 150 "$ALLREDUCE_PERF" -b 1M -e 1M -n 2000 -w 5 -c 1 >"$JOB_LOG" 2>&1 &
    job=$!
    for _ in $(seq 600); do
      grep -q -E "[0-9]+ ranks on [0-9]+ hosts" "$JOB_LOG" && break
      kill -0 $job 2>/dev/null || break
      sleep 0.1
    done
    sleep 0.5
    ip link del brgone
    if kill -0 $job 2>/dev/null; then echo "bridge deleted while the job ran"; else echo "bridge deleted after the job"; fi
    wait $job
    rc=$?
    cat "$JOB_LOG"
    exit $rc' >"$out" 2>&1
  local rc=$?
  ((rc != 77)) || { echo "SKIP: cannot make a network namespace with a bridge"; exit 77; }
  grep -q "bridge deleted while the job ran" "$out" || { cat "$out"; fail "the job ended before the bridge was deleted (status $rc)"; }
  ((rc == 0)) || {
    grep -E "ERROR|failed|timed out" "$out" | head -20
    fail "allreduce_perf over ucx exited with status $rc after the bridge went"
  }
  grep -q 'Out of bounds values : 0 OK' "$out" || fail "allreduce_perf over ucx did not report 0 wrong"
  [[ -n ${NETNS_UCX_DEVICES:-} ]] || grep -q "UCX's network devices: lo" "$out" ||
    fail "no rank says it gave UCX the loopback interface"
  echo "ok: 4 ranks over UCX's tcp outlived a bridge deleted under them, 0 wrong"
}

case_launcher() {
  local dir out status t0 t1
  dir=$NETNS_TMP
  out=$dir/out

  # Environment and addressing: rank r of 2 hosts x 2 is on host r/2, at 10.200.0.(r/2+1).
  # shellcheck disable=SC2016  # expanded by the ranks
  netns_exec "$out" --hosts 2 --ranks-per-host 2 --timeout 20 -- sh -c \
    'echo "ENV rank=$BRAID_RANK size=$BRAID_WORLD_SIZE local=$BRAID_LOCAL_RANK/$BRAID_LOCAL_SIZE host=$BRAID_HOST_ID store=$BRAID_STORE_ADDR ext=${BRAID_STORE_EXTERNAL:-} ip=$(ip -4 -o addr show dev eth0 | sed "s/.*inet \([0-9.]*\).*/\1/")"' ||
    fail "env dump exited with status $?"
  local r h line
  declare -A host_ids=()
  for ((r = 0; r < 4; ++r)); do
    line=$(grep "^ENV rank=$r " "$out") || fail "rank $r printed nothing"
    h=$((r / 2))
    [[ $line == *" size=4 local=$((r % 2))/2 "* ]] || fail "rank $r: wrong size or local rank: $line"
    [[ $line == *" host=bnr-$NR_PID-"*"-h$h "* ]] || fail "rank $r: BRAID_HOST_ID does not name host $h: $line"
    [[ $line == *" store=10.200.0.1:29500 ext= "* ]] || fail "rank $r: wrong store address: $line"
    [[ $line == *" ip=10.200.0.$((h + 1))" ]] || fail "rank $r: not in host $h's namespace: $line"
    line=${line#* host=}
    host_ids[${line%% *}]=1
  done
  ((${#host_ids[@]} == 2)) || fail "want 2 distinct BRAID_HOST_IDs, got: ${!host_ids[*]}"
  echo "ok: rank environment and addressing"

  # A failing rank: its status is ours, and the others are ended after --grace.
  t0=$(date +%s%N)
  # shellcheck disable=SC2016
  netns_exec "$out" --hosts 2 --ranks-per-host 2 --grace 1 --timeout 20 -- \
    sh -c 'if [ "$BRAID_RANK" = 2 ]; then exit 3; fi; exec sleep 60'
  status=$?
  t1=$(date +%s%N)
  ((status == 3)) || fail "a rank exiting 3 made netns_run exit $status, want 3"
  grep -q 'rank 2 (host .*-h1) exited with status 3' "$out" || fail "netns_run did not name the failed rank"
  (((t1 - t0) / 1000000 < 8000)) || fail "the other ranks were not ended promptly: $(((t1 - t0) / 1000000)) ms"
  echo "ok: failure of rank 2 propagated in $(((t1 - t0) / 1000000)) ms"

  # --timeout: status 124, everything ended.
  netns_exec "$out" --hosts 2 --ranks-per-host 1 --timeout 1 -- sleep 60
  status=$?
  ((status == 124)) || fail "--timeout 1 with 'sleep 60' exited $status, want 124"
  echo "ok: --timeout"

  # SIGKILL of netns_run: no trap runs; the ranks die with it (PDEATHSIG) and its watchdog
  # removes the namespaces.
  # A sleep with a duration no other process uses, so that pgrep finds exactly our ranks.
  local marker="sleep 59.$$$RANDOM"
  # shellcheck disable=SC2086  # two words on purpose
  "$NETNS_RUN" --hosts 2 --ranks-per-host 1 --timeout 30 -- $marker >"$out" 2>&1 &
  local pid=$! i
  for ((i = 0; i < 100; ++i)); do
    (($(pgrep -fc "^$marker") == 2)) && break
    sleep 0.1
  done
  (($(pgrep -fc "^$marker") == 2)) || { cat "$out"; fail "the ranks of the SIGKILL check did not start"; }
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  for ((i = 0; i < 100; ++i)); do
    [[ -z $(netns_left_by "$pid") ]] && (($(pgrep -fc "^$marker") == 0)) && break
    sleep 0.1
  done
  [[ -z $(netns_left_by "$pid") ]] || fail "namespaces left 10 s after SIGKILL: $(netns_left_by "$pid" | tr '\n' ' ')"
  (($(pgrep -fc "^$marker") == 0)) || fail "ranks still running 10 s after SIGKILL of netns_run"
  echo "ok: cleanup after SIGKILL in about $((i * 100)) ms"
}

# -----------------------------------------------------------------------------------------
[[ $# == 1 ]] || { echo "usage: netns_tests.sh CASE" >&2; exit 2; }
declare -F "case_$1" >/dev/null || { echo "netns_tests.sh: no case '$1'" >&2; exit 2; }
for v in MP_COLLECTIVES ALLREDUCE_PERF BRAID_INFO; do
  [[ -x ${!v:-} ]] || { echo "netns_tests.sh: $v is not set to an executable (run through CTest)" >&2; exit 2; }
done
netns_scratch_init
"case_$1"
