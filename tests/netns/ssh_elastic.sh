#!/usr/bin/env bash
# braidrun --host-discovery-script across hosts: three emulated hosts with their own sshd
# (ssh_hosts.sh). A training loop (mp_recover: every survivor must end with the parameters
# of a run without failures) starts on hosts a and b, 2 ranks each, the hosts coming from a
# discovery script that prints a file. The test takes b out of the file: braidrun stops b's
# ranks, and the two on a agree, shrink and go on. Then it lists c: braidrun starts the two
# replacements there, over ssh, and the running ranks admit them (matched by braidrun's
# index for them, not by the pid of the ssh client). The job ends at 4 ranks, every step
# done once.
#
# Skips (77) without root, ip, sshd or ssh. Needs BRAIDRUN and MP_RECOVER.
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/ssh_hosts.sh"
: "${BRAIDRUN:?}" "${MP_RECOVER:?}"
ssh_hosts_up 3

printf '%s:2\n%s:2\n' "${addr[0]}" "${addr[1]}" >"$T/hosts"
BRAIDRUN_GRACE_SEC=5 "$BRAIDRUN" --ssh "$SSH" --timeout 150 --min-np 2 --max-np 4 \
  --host-discovery-script "cat $T/hosts" -x MP_STEP_MS=150 "$MP_RECOVER" 70 4096 >"$T/out" 2>&1 &
run=$!

wait_for() {  # PATTERN COUNT SECONDS WHAT
  local i
  for ((i = 0; i < $3 * 10; ++i)); do
    (($(grep -c "$1" "$T/out") >= $2)) && return 0
    kill -0 "$run" 2>/dev/null || break
    sleep 0.1
  done
  cat "$T/out"
  fail "no $4"
}

sleep 3
echo "== host b leaves"
printf '%s:2\n' "${addr[0]}" >"$T/hosts"
wait_for "SHRUNK rank=[01] .* to=2 " 2 40 "shrink to the two ranks on host a"
grep -q "host ${addr[1]} is no longer listed; stopping rank" "$T/out" || { cat "$T/out"; fail "b's ranks were not stopped"; }
echo "== host c comes"
printf '%s:2\n%s:2\n' "${addr[0]}" "${addr[2]}" >"$T/hosts"
wait_for "started replacement .* on ${addr[2]}" 2 20 "replacements on host c"
wait_for "GROWN rank=" 2 60 "grow back to four ranks"
wait "$run"
status=$?
cat "$T/out"
((status == 0)) || fail "braidrun exited with $status"
finals=$(grep -c "FINAL rank=[0-9]* newrank=[0-9]* size=4 steps=70 checksum=.* match=1 same=1" "$T/out")
((finals == 4)) || fail "$finals of 4 ranks finished all 70 steps with the failure-free parameters"
grep -q "JOINED rank=.* size=4" "$T/out" || fail "no replacement joined"
echo "PASS: b's ranks stopped and shrunk away, two replacements on c admitted, 4 ranks finished every step"
