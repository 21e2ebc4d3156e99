#!/usr/bin/env bash
# braidrun across hosts over ssh: two emulated hosts (network namespaces on a bridge in this
# namespace, which plays the launching host), each with its own sshd (Debian's
# openssh-server) accepting a key made here. braidrun runs here and starts every rank over
# ssh; sshd gives each host's sessions BRAID_HOST_ID, as a real host would differ in its
# own id.
#
# The hosts come from ssh_hosts.sh. Checks: the variables each rank gets (ranks, local
# ranks and sizes, cross ranks, the store's address on the bridge); every collective across
# the hosts (mp_collectives) and
# allreduce_perf with zero wrong; a hostfile in mpirun's format with a local host beside a
# remote one; a rank failing on one host stops the ranks on every host (none left behind).
#
# Skips (77) without root, ip, sshd or ssh, or where namespaces cannot be made.
# Needs BRAIDRUN, MP_COLLECTIVES and ALLREDUCE_PERF.
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/ssh_hosts.sh"
: "${BRAIDRUN:?}" "${MP_COLLECTIVES:?}" "${ALLREDUCE_PERF:?}"
ssh_hosts_up 2

run() {  # braidrun with the test's ssh; output to $T/out (echoed)
  "$BRAIDRUN" --ssh "$SSH" --timeout 60 "$@" >"$T/out" 2>&1
  local s=$?
  cat "$T/out"
  return $s
}

echo "== the variables every rank gets: -H a:2,b:1"
run -H "${addr[0]}:2,${addr[1]}:1" sh -c \
  'echo VARS $BRAID_RANK $BRAID_WORLD_SIZE $BRAID_LOCAL_RANK $BRAID_LOCAL_SIZE $HOROVOD_CROSS_RANK $HOROVOD_CROSS_SIZE $BRAID_HOST_ID $BRAID_STORE_ADDR $HOROVOD_HOSTNAME' ||
  fail "braidrun -H failed"
got=$(grep '^VARS' "$T/out" | sed 's/:[0-9]* / /' | sort)
want=$(printf '%s\n' \
  "VARS 0 3 0 2 0 2 sshhost0 $subnet.1 ${addr[0]}" \
  "VARS 1 3 1 2 0 1 sshhost0 $subnet.1 ${addr[0]}" \
  "VARS 2 3 0 1 1 2 sshhost1 $subnet.1 ${addr[1]}")
[[ $got == "$want" ]] || fail "variables: got
$got
want
$want"

echo "== every collective across the two hosts, 2 ranks each"
run -H "${addr[0]}:2,${addr[1]}:2" --tag-output "$MP_COLLECTIVES" || fail "mp_collectives over ssh failed"
for r in 0 1 2 3; do grep -q "collectives ok rank $r" "$T/out" || fail "no 'collectives ok rank $r'"; done

echo "== allreduce_perf across the hosts checks its results"
run -H "${addr[0]}:2,${addr[1]}:2" "$ALLREDUCE_PERF" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 ||
  fail "allreduce_perf over ssh failed"
grep -q "Out of bounds values : 0 OK" "$T/out" || fail "allreduce_perf found wrong values"

echo "== a hostfile (mpirun's format) with this host beside a remote one"
printf '# this host, then one emulated host\nlocalhost slots=1\n%s slots=2\n' "${addr[1]}" >"$T/hosts"
run --hostfile "$T/hosts" "$MP_COLLECTIVES" || fail "mp_collectives with a hostfile failed"
for r in 0 1 2; do grep -q "collectives ok rank $r" "$T/out" || fail "no 'collectives ok rank $r' (hostfile)"; done

echo "== a rank failing on one host stops the ranks on every host"
start=$(date +%s)
BRAIDRUN_GRACE_SEC=1 run -H "${addr[0]}:2,${addr[1]}:2" sh -c \
  'if [ "$BRAID_RANK" = 3 ]; then exit 7; fi; exec sleep 300'
status=$?
((status == 7)) || fail "braidrun's status is $status, not the failed rank's 7"
grep -q "rank 3 exited with status 7" "$T/out" || fail "the failed rank is not named"
(($(date +%s) - start < 30)) || fail "braidrun took more than 30 s to stop the others"
sleep 3  # the remote watchers' SIGTERM, then SIGKILL 2 s later
for i in 0 1; do
  left=$(ip netns pids "${ns[i]}" | xargs -r ps -o args= -p 2>/dev/null | grep -c 'sleep 300')
  ((left == 0)) || fail "$left rank(s) left running on ${addr[i]}"
done

echo "PASS"
