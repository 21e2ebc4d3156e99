#!/usr/bin/env bash
# OpenMPI's mpirun across hosts with no braid variables at all: two emulated hosts (the ssh
# hosts of ssh_hosts.sh; mpirun starts its daemons on them over that ssh), 2 ranks on each.
# OpenMPI's variables do not say where rank 0 runs, so rank 0 publishes the store's address
# through the PMIx server of its host's daemon and the others read it back.
#
# Checks: every collective across the hosts (mp_collectives), allreduce_perf with zero wrong,
# three inits in one process (mp_reinit: each init its own key), that the address did go
# through PMIx (braid's trace), and that without PMIx the error names what to set.
#
# Skips (77) without mpirun, root, ip, sshd or ssh, or where namespaces cannot be made.
# Needs MP_COLLECTIVES, MP_REINIT and ALLREDUCE_PERF.
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/ssh_hosts.sh"
: "${MP_COLLECTIVES:?}" "${MP_REINIT:?}" "${ALLREDUCE_PERF:?}"
command -v mpirun >/dev/null || skip "no mpirun (apt-get install openmpi-bin)"
ssh_hosts_up 2

# No MASTER_ADDR, no BRAID_STORE_ADDR: whatever the caller had is not passed on.
unset MASTER_ADDR MASTER_PORT BRAID_STORE_ADDR
run() {  # mpirun on the two hosts, 2 ranks each; output to $T/out (echoed)
  timeout 120 mpirun --allow-run-as-root --mca plm_rsh_agent "$SSH" --mca oob_tcp_if_include "$subnet.0/24" \
    --mca btl self,tcp -H "${addr[0]}:2,${addr[1]}:2" -np 4 "$@" >"$T/out" 2>&1
  local s=$?
  cat "$T/out"
  return $s
}

echo "== every collective across the two hosts"
run -x BRAID_DEBUG=TRACE "$MP_COLLECTIVES" || fail "mp_collectives under mpirun failed"
for r in 0 1 2 3; do grep -q "collectives ok rank $r" "$T/out" || fail "no 'collectives ok rank $r'"; done
grep -q "publishing store ${addr[0]}:[0-9]* as PMIx key braid.store.n4.i0" "$T/out" ||
  fail "rank 0 did not publish the store's address on ${addr[0]} through PMIx"

echo "== allreduce_perf checks its results"
run "$ALLREDUCE_PERF" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 || fail "allreduce_perf under mpirun failed"
grep -q "Out of bounds values : 0 OK" "$T/out" || fail "allreduce_perf found wrong values"

echo "== three inits in one process, each meeting the others' through its own key"
run "$MP_REINIT" 3 || fail "mp_reinit under mpirun failed"
for r in 0 1 2 3; do grep -q "reinit ok rank $r rounds 3" "$T/out" || fail "no 'reinit ok rank $r'"; done

echo "== without a PMIx server the error says what to set"
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2 \
  PMIX_NAMESPACE='' PMIX_RANK='' BRAID_TIMEOUT=5 timeout 30 "$MP_COLLECTIVES" >"$T/out" 2>&1
status=$?
cat "$T/out"
((status != 0 && status != 124)) || fail "a rank with no way to the store gave status $status"
grep -q "MASTER_ADDR" "$T/out" || fail "the error does not say to set MASTER_ADDR"

echo "PASS"
